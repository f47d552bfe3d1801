"""``rlinf-trainer serve`` in ``train`` mode: PPO on sim envs plus real agents on the MuJoCo twin."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.integration.link_harness import start_agent, wait_until
from tests.integration.test_serve import dataset
from trainer.checkpoint import latest_checkpoint
from trainer.configs.errors import ConfigError
from trainer.server.config import load_serve_config
from trainer.server.train_mode import train

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
    - run.final_eval_episodes=0
    - run.checkpoint_every=2
    - algo.num_minibatches=2
"""

# The reward-source tests need a few robot episodes, not a learning curve: 5 iterations, not 10. At
# 120 env steps the classifier's successes began in the 2nd iteration, and every iteration of the
# human-label test held one success and one failure.
REWARD_SOURCE_YAML = SERVE_YAML.replace("run.total_env_steps=240", "run.total_env_steps=120")
assert "run.total_env_steps=120" in REWARD_SOURCE_YAML

RLPD_YAML = """
server: {mode: train, insecure: true, host: 127.0.0.1, port: 0}
train:
  config: rlpd_pick_lift
  overrides:
    - env.id=rlinf/FrankaReach-v0
    - env.num_envs=1
    - "env.kwargs={cameras: [], action_rotation: true, privileged_state: false, max_episode_steps: 8}"
    - policy.hidden_sizes=[32]
    - algo.critic_hidden=[32]
    - algo.demo_episodes=0
    - algo.batch_size=16
    - run.total_env_steps=64
    - run.eval_every=0
    - run.final_eval_episodes=0
    - run.checkpoint_every=1
"""


def train_config(tmp_path: Path, *overrides: str, yaml: str = SERVE_YAML):
    path = tmp_path / "serve.yaml"
    path.write_text(yaml)
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
    config = train_config(
        tmp_path, "train.min_robots=2", "train.robot_weight=2.0", "train.final_eval_episodes=2"
    )
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
    assert all(row["source/robot:b/missed_ticks_per_step"] >= 0 for row in rows)  # its real time, logged
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
    # The final policy was run greedily on both robots at the end.
    final = json.loads((run_dir / "robot_eval.json").read_text())
    assert final["policy"] == str(latest_checkpoint(run_dir) / "policy")
    assert {robot: r["episodes"] + r["aborted"] for robot, r in final["robots"].items()} == {"a": 2, "b": 2}


def test_train_mode_refuses_grpo_and_a_bad_training_key(tmp_path):
    with pytest.raises(ConfigError, match="grpo"):
        train_config(tmp_path, "train.config=grpo_reach")
    with pytest.raises(ConfigError, match="nosuch"):
        train_config(tmp_path, "train.overrides=[run.nosuch=1]")
    for placement in ("collocated", "disaggregated", "hybrid", "auto"):  # never a silent sim-only run
        with pytest.raises(ConfigError, match=f"needs cluster.placement=sequential, got '{placement}'"):
            train_config(tmp_path, f"train.overrides=[cluster.placement={placement}]")
    with pytest.raises(ConfigError, match="not valid YAML"):
        train_config(tmp_path, "train.overrides=[env.kwargs=[}]")
    broken = tmp_path / "broken.yaml"
    broken.write_text("server: {mode: train\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml is not valid YAML"):
        load_serve_config(str(broken))


def test_rlpd_keeps_a_humans_takeovers_on_a_robot_as_demonstrations(tmp_path):
    """HIL-SERL's intervention buffer: every robot step a human drove joins RLPD's demo half, stored
    with the action that really ran (the human's, after the agent's safety), not the policy's sample."""
    from robot_agent.teleop import TeleopReading, make_teleop
    from robot_agent.teleop.replay import write_trace

    readings = ([TeleopReading()] * 2 + [TeleopReading(motion=np.array([0.0, 0.4, 0, 0, 0, 0], np.float32),
                                                       takeover=True)] * 3) * 20  # fmt: skip
    write_trace(tmp_path / "trace.jsonl", readings)
    config = train_config(tmp_path, "train.min_robots=1", yaml=RLPD_YAML)
    link, started = {}, threading.Event()
    thread = threading.Thread(
        target=train, args=(config, lambda s: (link.setdefault("server", s), started.set())), daemon=True
    )
    thread.start()
    assert started.wait(30)
    device = make_teleop("replay", {"path": str(tmp_path / "trace.jsonl")})
    agent = start_agent(link["server"].port, tmp_path / "spool", robot_id="r", driver={**TWIN, "cameras": []},
                        teleop=device)  # fmt: skip
    try:
        thread.join(240)
        assert not thread.is_alive(), "training did not finish"
    finally:
        agent.stop()
    run_dir = tmp_path / "serve" / "train"
    rows = metrics(run_dir)
    demos = np.load(latest_checkpoint(run_dir) / "demos.npz")
    size = int(demos["size"])
    # Only the human's steps: no scripted demos were asked for.
    assert size == rows[-1]["train/interventions"] > 0
    # The human pushed +y at 0.4; the agent's safety scales it to its per-step limit: the stored action
    # is that, in the policy's [-1, 1] units, for every demo row.
    actions = demos["action"][:size]
    assert np.all(actions[:, 1] > 0.1) and np.allclose(actions[:, [0, 2, 3, 4, 5]], 0.0, atol=1e-5)
    # Gripper: the human holds it open; a hand-over step moves at most max_gripper_change (1.0) from
    # the policy's last command, so it is never below 0 there and 1 elsewhere.
    assert np.all(actions[:, 6] >= -1e-6) and np.mean(np.isclose(actions[:, 6], 1.0)) > 0.5
    _, _, frames = dataset(tmp_path / "ds")
    assert int(frames["intervention"].sum()) >= size


def height_classifier(tmp_path: Path, spec, z0: float = 0.0) -> Path:
    """A classifier on the state alone that calls a frame successful when the TCP is above ``z0``
    (the twin's home height): a stand-in for a trained one, to test the plumbing end to end."""
    import torch

    from policies.reward import ClassifierConfig, SuccessClassifier

    classifier = SuccessClassifier(spec, ClassifierConfig(cameras=[], use_state=True, hidden_sizes=[]))
    z = spec.state_slices()["tcp_pos"].start + 2
    linear = classifier.head[0]
    with torch.no_grad():
        linear.weight.zero_()
        linear.weight[0, z] = 400.0
        linear.bias.fill_(-400.0 * z0)
    classifier.save(tmp_path / "classifier")
    return tmp_path / "classifier"


def test_a_classifier_rewards_and_ends_episodes_of_a_twin_that_hides_its_reward(tmp_path):
    import sim_envs

    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=(), action_rotation=True, privileged_state=False)
    obs, _ = env.reset(seed=0)
    home_z = float(obs["state"][env.env_spec.state_slices()["tcp_pos"]][2])
    classifier = height_classifier(tmp_path, env.env_spec, home_z)
    env.close()
    config = train_config(tmp_path, "train.min_robots=1", "reward.source=classifier",
                          f"reward.classifier={classifier}", "reward.consecutive_frames=2",
                          yaml=REWARD_SOURCE_YAML)  # fmt: skip
    started, link, outcome = threading.Event(), {}, {}

    def on_started(server) -> None:
        link["server"] = server
        started.set()

    thread = threading.Thread(target=lambda: outcome.setdefault("p", train(config, on_started)), daemon=True)
    thread.start()
    assert started.wait(30)
    hidden = {**TWIN, "report_reward": False}
    agent = start_agent(link["server"].port, tmp_path / "spool", robot_id="r", driver=hidden)
    try:
        thread.join(240)
        assert not thread.is_alive(), "training did not finish"
    finally:
        agent.stop()
    rows = metrics(tmp_path / "serve" / "train")
    robot = [row for row in rows if row.get("source/robot:r/episodes")]
    assert robot, rows[-1].keys()
    # The twin reports 0 reward and never success; every robot reward and success is the classifier's,
    # and its successes end episodes before the 8-step horizon.
    assert max(row["source/robot:r/success_rate"] for row in robot) > 0
    assert max(row["source/robot:r/return_mean"] for row in robot) >= 1.0
    assert min(row["source/robot:r/episode_length"] for row in robot) < 8
    # The dataset records the classifier's rewards with the frames (the agent sent zeros), and says so.
    from protos.lerobot_reader import read_episodes, read_frames

    episodes, frames = read_episodes(tmp_path / "ds"), read_frames(tmp_path / "ds")
    trained = episodes[episodes["reward_source"] == "classifier"]
    assert len(trained) >= 1 and set(episodes["reward_source"]) <= {"classifier", "env"}
    judged = frames[frames["episode_index"].isin(trained["episode_index"])]
    assert judged["next.reward"].sum() >= 1.0 and judged["next.success"].any()
    assert trained["success"].any()


def test_a_humans_labels_are_the_rewards_of_a_twin_that_hides_its_own(tmp_path):
    """reward.source=human: the operator's success/failure label ends each robot episode and is its
    reward (1 at the last step for success, 0 for failure), in training and in the recorded dataset."""
    from protos.lerobot_reader import read_episodes, read_frames
    from robot_agent.teleop import TeleopReading, make_teleop
    from robot_agent.teleop.replay import write_trace

    idle = [TeleopReading()] * 3
    readings = ([*idle, TeleopReading(label="success"), *idle, TeleopReading(label="failure")]) * 30
    write_trace(tmp_path / "trace.jsonl", readings)
    config = train_config(tmp_path, "train.min_robots=1", "reward.source=human", yaml=REWARD_SOURCE_YAML)
    link, started, outcome = {}, threading.Event(), {}
    thread = threading.Thread(
        target=lambda: outcome.setdefault(
            "p", train(config, lambda s: (link.setdefault("server", s), started.set()))
        ),
        daemon=True,
    )
    thread.start()
    assert started.wait(30)
    device = make_teleop("replay", {"path": str(tmp_path / "trace.jsonl")})
    hidden = {**TWIN, "cameras": [], "report_reward": False}
    agent = start_agent(link["server"].port, tmp_path / "spool", robot_id="r", driver=hidden, teleop=device)
    try:
        thread.join(240)
        assert not thread.is_alive(), "training did not finish"
    finally:
        agent.stop()
    robot = [row for row in metrics(tmp_path / "serve" / "train") if row.get("source/robot:r/episodes")]
    assert robot and max(row["source/robot:r/success_rate"] for row in robot) > 0
    assert min(row["source/robot:r/success_rate"] for row in robot) < 1  # the failures count as failures
    episodes, frames = read_episodes(tmp_path / "ds"), read_frames(tmp_path / "ds")
    labelled = episodes[episodes["reward_source"] == "human"]
    assert labelled["success"].any() and not labelled["success"].all()
    for _, episode in labelled.iterrows():
        rewards = frames[frames["episode_index"] == episode["episode_index"]]["next.reward"].to_numpy()
        assert rewards[:-1].sum() == 0 and rewards[-1] == (1.0 if episode["success"] else 0.0)


def test_a_classifier_for_another_spec_is_refused(tmp_path):
    from trainer.server.reward_source import reward_factory

    spec = sim_envs_spec(privileged_state=True)
    classifier = height_classifier(tmp_path, spec)
    config = train_config(tmp_path, "reward.source=classifier", f"reward.classifier={classifier}")
    with pytest.raises(ValueError, match=r"reward\.classifier=.* reads state fields .*, the robots give"):
        reward_factory(config.reward, sim_envs_spec(privileged_state=False))
    with pytest.raises(ConfigError, match=r"needs reward\.classifier"):
        train_config(tmp_path, "reward.source=classifier")
    with pytest.raises(ConfigError, match=r"reward\.source must be one of"):
        train_config(tmp_path, "reward.source=oracle")


def sim_envs_spec(**kwargs):
    import sim_envs

    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=(), action_rotation=True, **kwargs)
    spec = env.env_spec
    env.close()
    return spec


VLA_YAML = """
server: {mode: train, insecure: true, host: 127.0.0.1, port: 0}
train:
  config: ppo_reach
  overrides:
    - env.num_envs=2
    - env.backend=inline
    - "env.kwargs={cameras: [front], image_height: 64, image_width: 64, action_rotation: true, privileged_state: false, max_episode_steps: 8}"
    - policy.kind=vla
    - policy.cameras=[front]
    - policy.chunk_size=2
    - run.total_env_steps=48
    - run.eval_every=0
    - run.final_eval_episodes=0
    - run.checkpoint_every=1
    - algo.num_minibatches=2
    - algo.update_epochs=1
"""


def test_a_vla_trains_on_sim_and_a_twin_robot_in_serve(tmp_path):
    config = train_config(tmp_path, "train.min_robots=1", yaml=VLA_YAML)
    started, link, outcome = threading.Event(), {}, {}

    def on_started(server) -> None:
        link["server"] = server
        started.set()

    thread = threading.Thread(target=lambda: outcome.setdefault("p", train(config, on_started)), daemon=True)
    thread.start()
    assert started.wait(30)
    agent = start_agent(link["server"].port, tmp_path / "spool", robot_id="r", driver=TWIN)
    try:
        thread.join(240)
        assert not thread.is_alive(), "training did not finish"
    finally:
        agent.stop()
    rows = metrics(tmp_path / "serve" / "train")
    assert any(row.get("source/robot:r/episodes") for row in rows) and np.isfinite(
        rows[-1]["train/policy_loss"]
    )
    from policies import load_policy

    saved = load_policy(latest_checkpoint(tmp_path / "serve" / "train") / "policy")
    assert type(saved).__name__ == "OpenVLAPolicy"


def test_the_cotraining_preset_fits_a_twin_robot_and_waits_for_two():
    from protos.env_spec import spec_mismatch
    from robot_agent.drivers.sim_twin import SimTwinConfig, SimTwinDriver
    from trainer.runner import make_sim_envs
    from trainer.server.config import training_config

    config = load_serve_config("cotrain_pick_lift", ["server.insecure=true"])
    assert (
        config.server.mode == "train"
        and config.train.min_robots == 2
        and config.train.final_eval_episodes > 0
    )
    training = training_config(config)
    # The sim applies the agents' default safety limits, as the agents apply them.
    from robot_agent.safety import SafetyConfig

    limits = SafetyConfig().sim_limits()
    assert {name: training.env.kwargs[name] for name in limits} == limits
    sim = make_sim_envs(replace(training, env=replace(training.env, num_envs=1, backend="inline")))
    twin = SimTwinDriver(SimTwinConfig(task="pick_lift", privileged_state=True))
    try:
        assert spec_mismatch(sim.spec, twin.spec, "the twin") is None
        assert "the twin" in spec_mismatch(
            sim.spec, SimTwinDriver(SimTwinConfig(task="pick_lift")).spec, "the twin"
        )
    finally:
        sim.close()
        twin.close()
    with pytest.raises(ConfigError, match=r"serve presets: \['cotrain_pick_lift'"):
        load_serve_config("cotrain_nosuch")


def test_training_with_no_robot_after_the_wait_is_one_line(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text(SERVE_YAML)
    exe = str(Path(sys.executable).with_name("rlinf-trainer"))
    done = subprocess.run(
        [exe, "serve", "--config", str(path), "train.min_robots=1", "train.wait_timeout_s=1",
         f"log_dir={tmp_path / 'serve'}", f"data.record_dir={tmp_path / 'ds'}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "rlinf-trainer serve: train.min_robots=1: only 0 robots connected after 1 s"
    )


def test_a_robot_that_does_not_fit_the_spec_does_not_count_towards_min_robots(tmp_path):
    config = train_config(tmp_path, "train.min_robots=1", "train.wait_timeout_s=3")
    agents = []

    def on_started(server) -> None:  # a twin that shows the goal: its state is not the sim's
        agents.append(
            start_agent(server.port, tmp_path / "x", robot_id="x", driver={**TWIN, "privileged_state": True})
        )

    try:
        with pytest.raises(
            TimeoutError,
            match=r"only 0 robots connected after 3 s \(1 more did not fit: state fields differ.*robot x has ",
        ):
            train(config, on_started)
    finally:
        for agent in agents:
            agent.stop()
    assert latest_checkpoint(tmp_path / "serve" / "train") is None
