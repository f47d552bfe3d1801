"""The README's path after the main job, command by command: train the default preset, run its policy
on the default twin (``serve server.mode=eval``), then train on sim + that twin (``server.mode=train``).

Each step is the README's command as a real process (trainer, agent), shortened by overrides only:
a small budget and 10-step episodes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_serve import free_port
from trainer.checkpoint import latest_checkpoint

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
SHORT = "env.kwargs={cameras: [], action_rotation: false, max_episode_steps: 10}"
# The README's twin.toml (what the default policy reads and sends), with 10-step episodes.
TWIN_TOML = "[driver]\nprivileged_state = true\naction_rotation = false\nmax_episode_steps = 10\n"


def start(*command: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [str(BIN / command[0]), *command[1:]], stdout=log.open("w"), stderr=subprocess.STDOUT
    )


def stop(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGINT)
    try:
        return process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        raise


def wait_for(predicate, timeout: float, what: str, *watched: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        for process in watched:
            assert process.poll() is None, (
                f"{process.args[0]} exited ({process.returncode}) waiting for {what}"
            )
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_default_policy_runs_on_the_default_twin_and_trains_on_sim_plus_twin(tmp_path):
    # 1. The main job (`rlinf-trainer train`), on a small budget.
    run = tmp_path / "run"
    done = subprocess.run(
        [str(BIN / "rlinf-trainer"), "train", SHORT, "env.num_envs=4", "env.backend=inline",
         "run.total_env_steps=160", "run.eval_every=0", f"run.output_dir={run}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    policy = latest_checkpoint(run) / "policy"
    twin_toml = tmp_path / "twin.toml"
    twin_toml.write_text(TWIN_TOML)

    # 2. Its policy on the twin: `serve server.mode=eval` + `rlinf-robot connect --robot sim-twin`.
    port = free_port()
    common = ["--insecure", "server.host=127.0.0.1", f"server.port={port}", f"log_dir={tmp_path / 'serve'}",
              f"data.record_dir={tmp_path / 'robot_ds'}"]  # fmt: skip
    agent_args = ("rlinf-robot", "connect", "--server", f"127.0.0.1:{port}", "--robot", "sim-twin", "--insecure",
                  "--robot-config", str(twin_toml), "--spool-dir", str(tmp_path / "spool"))  # fmt: skip
    server = start("rlinf-trainer", "serve", *common, "server.mode=eval", f"eval.policy_path={policy}",
                   "eval.episodes_per_robot=2", log=tmp_path / "eval.log")  # fmt: skip
    agent = start(*agent_args, log=tmp_path / "agent_eval.log")
    results = tmp_path / "serve" / "eval.json"

    def evaluated() -> bool:
        if not results.is_file():
            return False
        robots = json.loads(results.read_text())["robots"]
        return any(r.get("episodes", 0) >= 2 for r in robots.values())

    try:
        wait_for(evaluated, 120, "2 evaluation episodes on the twin", server, agent)
    finally:
        assert stop(agent) == 0
        assert stop(server) == 0, (tmp_path / "eval.log").read_text()[-2000:]
    assert "does not fit" not in (tmp_path / "eval.log").read_text()

    # 3. Training on sim + the twin, from that policy: `serve server.mode=train`.
    overrides = f"train.overrides=[policy.init_from={policy}, env.num_envs=2, env.backend=inline, '{SHORT}', run.total_env_steps=60, run.eval_every=0]"
    server = start("rlinf-trainer", "serve", *common, "server.mode=train", "train.config=ppo_pick_lift",
                   "train.min_robots=1", "train.wait_timeout_s=120", "train.final_eval_episodes=1", overrides,
                   log=tmp_path / "train.log")  # fmt: skip
    agent = start(*agent_args, log=tmp_path / "agent_train.log")
    try:
        assert server.wait(240) == 0, (tmp_path / "train.log").read_text()[-3000:]
    finally:
        if server.poll() is None:
            server.kill()
        stop(agent)
    train_dir = tmp_path / "serve" / "train"
    rows = [json.loads(line) for line in (train_dir / "metrics.jsonl").read_text().splitlines()]
    robot_episodes = [
        v for row in rows for k, v in row.items() if k.startswith("source/robot:") and k.endswith("/episodes")
    ]
    assert sum(robot_episodes) >= 1, "the twin never joined the training"
    final = json.loads((train_dir / "robot_eval.json").read_text())["robots"]
    assert [r["episodes"] for r in final.values()] == [1]
