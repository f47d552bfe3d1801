"""The README's path after the main job, from the README's own text: train the default preset, run
its policy on the twin (``serve server.mode=eval``), then train on sim + that twin (``server.mode=train``).

Each step is the README's command as a real process (trainer, agent), with this test's port, folders
and a shortening (a small budget, 10-step episodes) appended: if the README drifts from the CLI,
this fails.
"""

from __future__ import annotations

import json
import shlex
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
ROOT = Path(__file__).resolve().parents[2]
SHORT = "env.kwargs={cameras: [], action_rotation: false, max_episode_steps: 10}"


def start(*argv: str, cwd: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(list(argv), cwd=cwd, stdout=log.open("w"), stderr=subprocess.STDOUT)


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


def readme_commands() -> list[list[str]]:
    """The commands of the README's code block after "Then run that policy on the sim twin", each an
    argv (continuation lines joined, comments and a trailing ``&`` dropped)."""
    text = (ROOT / "README.md").read_text()
    block = text[text.index("Then run that policy on the sim twin") :]
    block = block[block.index("```bash") + len("```bash") : block.index("```", block.index("```bash") + 7)]
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            commands.append(argv[:-1] if argv[-1] == "&" else argv)
    return commands


def test_the_readmes_path_runs_the_default_policy_on_the_twin_and_trains_on_sim_plus_twin(tmp_path):
    printf, serve_eval, connect, serve_train, connect_again = readme_commands()
    assert connect == connect_again and printf[0] == "printf"
    # 1. The main job (`rlinf-trainer train`), on a small budget.
    run = tmp_path / "run"
    done = subprocess.run(
        [str(BIN / "rlinf-trainer"), "train", SHORT, "env.num_envs=4", "env.backend=inline",
         "run.total_env_steps=160", "run.eval_every=0", f"run.output_dir={run}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    policy = str(latest_checkpoint(run) / "policy")
    subprocess.run(
        printf[:-2] if printf[-2] == ">" else printf,
        check=True,
        cwd=tmp_path,
        stdout=(tmp_path / "twin.toml").open("w"),
    )
    with (tmp_path / "twin.toml").open("a") as toml:
        toml.write("max_episode_steps = 10\n")  # short episodes, for the test's sake

    port = free_port()

    def local(argv: list[str], *extra: str) -> list[str]:
        """The README's argv run here: its binaries, this test's port, policy and folders."""
        out = [str(BIN / Path(argv[0]).name)]
        for arg in argv[1:]:
            arg = arg.replace("runs/<run>/checkpoints/step_<N>/policy", policy).replace(":50051", f":{port}")
            if arg.startswith("train.overrides=[") and arg.endswith("]"):
                arg = arg[:-1] + f", env.backend=inline, '{SHORT}', run.total_env_steps=60, run.eval_every=0]"
            out.append(arg)
        return [*out, *extra]

    common = ["server.host=127.0.0.1", f"server.port={port}", f"log_dir={tmp_path / 'serve'}",
              f"data.record_dir={tmp_path / 'robot_ds'}"]  # fmt: skip
    agent_argv = local(connect, "--spool-dir", str(tmp_path / "spool"))

    # 2. Its policy on the twin: `serve server.mode=eval` + `rlinf-robot connect --robot sim-twin`.
    server = start(
        *local(serve_eval, *common, "eval.episodes_per_robot=2"), cwd=tmp_path, log=tmp_path / "eval.log"
    )
    agent = start(*agent_argv, cwd=tmp_path, log=tmp_path / "agent_eval.log")
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
    server = start(*local(serve_train, *common, "train.wait_timeout_s=120", "train.final_eval_episodes=1"),
                   cwd=tmp_path, log=tmp_path / "train.log")  # fmt: skip
    agent = start(*agent_argv, cwd=tmp_path, log=tmp_path / "agent_train.log")
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
