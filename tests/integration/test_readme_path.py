"""The getting-started path (docs/getting-started.md) from the page's own text: train the default
preset, run its policy on the twin (``serve server.mode=eval``, which exits after its episodes), then
train on sim + that twin (``server.mode=train``) while the same agent stays up and rejoins.

Each step is the page's command as a real process (trainer, agent) in a fresh folder, with its paths
as written (``runs/latest/checkpoints/latest/policy``), this test's port and a shortening (a small
budget, 10-step episodes) appended: if the page drifts from the CLI, this fails.
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


PAGE = ROOT / "docs" / "getting-started.md"


def readme_commands() -> list[list[str]]:
    """The commands of the page's code block under "Run the policy on the sim twin", each an argv
    (continuation lines joined, comments dropped)."""
    text = PAGE.read_text()
    block = text[text.index("## Run the policy on the sim twin") :]
    block = block[block.index("```bash") + len("```bash") : block.index("```", block.index("```bash") + 7)]
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            assert argv[-1] != "&", f"{PAGE.name}: a command left running in the background: {line}"
            commands.append(argv)
    return commands


def test_the_readmes_path_runs_the_default_policy_on_the_twin_and_trains_on_sim_plus_twin(tmp_path):
    printf, serve_eval, connect, serve_train = readme_commands()
    assert printf[0] == "printf"
    # 1. The main job (`rlinf-trainer train`), on a small budget, in its default folder: runs/latest.
    done = subprocess.run(
        [str(BIN / "rlinf-trainer"), "train", SHORT, "env.num_envs=4", "env.backend=inline",
         "run.total_env_steps=160", "run.eval_every=0", "run.final_eval_episodes=0"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "runs" / "latest" / "learning_curve.png").is_file()
    assert "checkpoints/latest/policy" in done.stdout.splitlines()[-1]
    policy = tmp_path / "runs" / "latest" / "checkpoints" / "latest" / "policy"
    assert (policy / "policy.json").is_file()
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
        """The page's argv run here: its binaries (any venv), this test's port and folders."""
        out = [str(BIN / Path(argv[0]).name)]
        for arg in argv[1:]:
            arg = arg.replace(":50051", f":{port}")
            if arg.startswith("train.overrides=[") and arg.endswith("]"):
                arg = arg[:-1] + f", env.backend=inline, '{SHORT}', run.total_env_steps=60, run.eval_every=0]"
            out.append(arg)
        return [*out, *extra]

    common = [f"server.port={port}", "server.host=127.0.0.1"]
    agent = start(*local(connect), cwd=tmp_path, log=tmp_path / "agent.log")

    # 2. Its policy on the twin: eval plays its episodes, prints the results and exits by itself.
    try:
        evaluated = subprocess.run(local(serve_eval, *common), cwd=tmp_path, capture_output=True, text=True,
                                   timeout=180)  # fmt: skip
        assert evaluated.returncode == 0, evaluated.stderr[-2000:]
        results = json.loads((tmp_path / "runs" / "serve" / "eval.json").read_text())["robots"]
        assert [r["episodes"] for r in results.values()] == [5]
        robot = next(iter(results))
        assert f"eval {robot}: {results[robot]['successes']}/5 successes" in evaluated.stdout
        assert "does not fit" not in evaluated.stderr

        # 3. Training on sim + the twin, from that policy; the same agent rejoins the new server.
        trained = subprocess.run(local(serve_train, *common, "train.wait_timeout_s=120", "train.final_eval_episodes=1"),
                                 cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert trained.returncode == 0, trained.stderr[-3000:]
    finally:
        assert stop(agent) == 0, (tmp_path / "agent.log").read_text()[-2000:]
    train_dir = tmp_path / "runs" / "serve" / "train"
    rows = [json.loads(line) for line in (train_dir / "metrics.jsonl").read_text().splitlines()]
    robot_episodes = [
        v for row in rows for k, v in row.items() if k.startswith("source/robot:") and k.endswith("/episodes")
    ]
    assert sum(robot_episodes) >= 1, "the twin never joined the training"
    final = json.loads((train_dir / "robot_eval.json").read_text())["robots"]
    assert [r["episodes"] for r in final.values()] == [1]
    assert (train_dir / "learning_curve.png").is_file()
