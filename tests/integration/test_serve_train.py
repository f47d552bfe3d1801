"""``rlinf-trainer serve`` in ``train`` mode: PPO on sim envs plus real agents on the MuJoCo twin."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tests.integration.link_harness import start_agent, wait_until
from tests.integration.test_serve import dataset
from trainer.checkpoint import latest_checkpoint
from trainer.configs.loader import ConfigError
from trainer.server.config import load_serve_config
from trainer.server.serve import train

pytestmark = pytest.mark.slow
# 10 Hz: an 8-step episode lasts 0.8 s, so stopping an agent mid-episode is not a race on a busy machine.
TWIN = {"task": "reach", "max_episode_steps": 8, "cameras": ["front"], "image_size": 64, "control_hz": 10.0}
SERVE_YAML = """
server: {mode: train, insecure: true, host: 127.0.0.1, port: 0}
train:
  config: ppo_reach
  overrides:
    - env.num_envs=2
    - env.backend=inline
    - "env.kwargs={cameras: [], action_rotation: true, privileged_state: false, max_episode_steps: 8}"
    - policy.hidden_sizes=[32]
    - run.total_env_steps=240
    - run.eval_every=0
    - run.checkpoint_every=2
    - algo.num_minibatches=2
"""


def train_config(tmp_path: Path, *overrides: str):
    path = tmp_path / "serve.yaml"
    path.write_text(SERVE_YAML)
    return load_serve_config(
        str(path),
        [
            f"data.record_dir={tmp_path / 'ds'}",
            f"data.sim_record_dir={tmp_path / 'sim-ds'}",
            f"log_dir={tmp_path / 'serve'}",
            *overrides,
        ],
    )


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_ppo_trains_on_sim_and_robots_through_a_drop_and_a_rejoin(tmp_path):
    config = train_config(tmp_path, "train.min_robots=2", "train.robot_weight=2.0")
    started = threading.Event()
    link = {}

    def on_started(server) -> None:
        link["server"] = server
        started.set()

    outcome: dict = {}
    thread = threading.Thread(
        target=lambda: outcome.setdefault("progress", train(config, on_started)), daemon=True
    )
    thread.start()
    assert started.wait(30)
    server = link["server"]
    agents = [start_agent(server.port, tmp_path / name, robot_id=name, driver=TWIN) for name in ("a", "b")]
    try:
        # Once robot a has finished an episode and is 3 steps into another, it goes away mid-episode,
        # then comes back with the same spool.
        def a_mid_episode() -> bool:
            session = server.sessions.get("a")
            return bool(session and session.stats.episodes_stored >= 1 and 2 <= session.latest.step <= 4)

        wait_until(a_mid_episode, timeout=60, what="robot a mid-episode")
        agents[0].stop()
        assert agents[0].agent.control.stats.episodes_aborted == 1  # it really was cut mid-episode
        wait_until(lambda: server.sessions["a"].state == "disconnected", what="robot a to drop")
        agents.append(start_agent(server.port, tmp_path / "a", robot_id="a", driver=TWIN))
        thread.join(240)
        assert not thread.is_alive(), "training did not finish"
    finally:
        for agent in agents:
            agent.stop()
    run_dir = tmp_path / "serve" / "train"
    progress = outcome["progress"]
    assert progress.env_steps >= 240 and latest_checkpoint(run_dir) is not None
    rows = metrics(run_dir)
    assert rows[0]["source/robot:a/episodes"] == rows[0]["source/robot:b/episodes"] == 1
    assert all(row["source/robot:b/episodes"] == 1 for row in rows)  # robot b carried on throughout
    assert rows[-1]["source/robot:a/episodes"] == 1  # robot a rejoined the pool
    assert all(row["source/sim:rlinf/FrankaReach-v0/episodes"] == 2 for row in rows)
    assert all(key in rows[-1] for key in ("train/policy_loss", "return_mean", "success_rate"))
    # Every robot episode is in the dataset; the cut one (replayed from a's spool) is marked aborted.
    _, episodes, _ = dataset(tmp_path / "ds")
    by_robot = {name: episodes[episodes["source"] == f"robot:{name}"] for name in ("a", "b")}
    assert by_robot["a"]["aborted"].sum() == 1 and not by_robot["b"]["aborted"].any()
    assert len(by_robot["b"]) >= len(rows) and episodes["episode_id"].is_unique
    # Every sim episode too, in its own dataset (sim and robot cameras need not match).
    info, sim_episodes, sim_frames = dataset(tmp_path / "sim-ds")
    assert info["total_episodes"] == len(sim_episodes) == 2 * len(rows)
    assert set(sim_episodes["source"]) == {"sim:rlinf/FrankaReach-v0"}
    assert sim_episodes["length"].tolist() == [8] * len(sim_episodes) and len(sim_frames) == 16 * len(rows)
    assert {"action", "next.reward", "intervention"} <= set(sim_frames.columns)


def test_train_mode_refuses_grpo_and_a_bad_training_key(tmp_path):
    with pytest.raises(ConfigError, match="grpo"):
        train_config(tmp_path, "train.config=grpo_reach")
    with pytest.raises(ConfigError, match="nosuch"):
        train_config(tmp_path, "train.overrides=[run.nosuch=1]")
    with pytest.raises(ConfigError, match="not valid YAML"):
        train_config(tmp_path, "train.overrides=[env.kwargs=[}]")
    broken = tmp_path / "broken.yaml"
    broken.write_text("server: {mode: train\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml is not valid YAML"):
        load_serve_config(str(broken))
