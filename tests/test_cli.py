import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_cli(script, *args):
    exe = Path(sys.executable).with_name(script)
    return subprocess.run([str(exe), *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_rollout_writes_frames_and_summary(tmp_path):
    result = run_cli("rlinf-trainer", "rollout", "--episodes", "1", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["success_rate"] == 1.0
    assert (tmp_path / "front.gif").stat().st_size > 1000
    assert (tmp_path / "front_last.png").exists()


def test_unknown_env_is_a_one_line_error(tmp_path):
    result = run_cli("rlinf-trainer", "rollout", "--env", "rlinf/Nope-v0", "--out", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: unknown env id 'rlinf/Nope-v0'")
    assert "Traceback" not in result.stderr


def test_robot_teleop_is_a_real_command_with_required_flags():
    result = run_cli("rlinf-robot", "teleop")
    assert result.returncode == 2 and "--robot" in result.stderr and "Traceback" not in result.stderr
    result = run_cli("rlinf-robot", "teleop", "--help")
    assert result.returncode == 0 and "--record-dir" in result.stdout


@pytest.mark.slow
def test_train_bad_input_is_one_line(tmp_path, capsys):
    from trainer.cli import main as trainer_main

    cases = [
        (["run.totl_env_steps=5"], "run.totl_env_steps"),
        (["algorithm=dqn"], "unknown algorithm 'dqn'"),
        (["env.id=rlinf/Nope-v0", f"run.output_dir={tmp_path / 'a'}"], "unknown env id 'rlinf/Nope-v0'"),
        (["env.kwargs.cameras=[top]", f"run.output_dir={tmp_path / 'b'}"], "unknown camera 'top'"),
        (["--config", "nope"], "unknown config 'nope'"),
        (["--resume", str(tmp_path / "missing")], "not a run directory"),
        # An output folder that cannot be made: refused before the envs are built, not at mkdir.
        ([f"run.output_dir={tmp_path / 'file' / 'run'}"], "is not a folder, so"),
    ]
    (tmp_path / "file").write_text("not a folder")
    # The installed console script once, as a user runs it; the other cases in this process (each
    # interpreter start costs about 1.5 s of imports).
    result = run_cli("rlinf-trainer", "train", *cases[0][0])
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-500:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and cases[0][1] in last, last
    for args, message in cases:
        code = trainer_main(["train", *args])
        err = capsys.readouterr().err
        assert code == 2, (args, err[-500:])
        last = err.strip().splitlines()[-1]
        assert last.startswith("error:") and message in last, (args, last)
        assert "Traceback" not in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # no half-made run directory


def test_rollout_plays_a_checkpoint_with_its_runs_env_config_and_any_tasks_expert(tmp_path):
    from trainer.checkpoint import POLICY_DIR, latest_checkpoint
    from trainer.configs import load_config
    from trainer.runner import Runner

    overrides = ["env.num_envs=2", "env.backend=inline", "policy.hidden_sizes=[16]", "run.total_env_steps=100",
                 "run.eval_every=0", "run.final_eval_episodes=0", f"run.output_dir={tmp_path / 'run'}",
                 "env.kwargs={cameras: [], action_rotation: false, max_episode_steps: 10}"]  # fmt: skip
    Runner(load_config("ppo_reach", overrides)).run()
    policy = latest_checkpoint(tmp_path / "run") / POLICY_DIR
    args = ["rollout", "--env", "rlinf/FrankaReach-v0", "--episodes", "1"]
    played = run_cli("rlinf-trainer", *args, "--policy", str(policy), "--out", str(tmp_path / "a"))
    assert played.returncode == 0, played.stderr
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["policy"] == str(policy)
    expert = run_cli("rlinf-trainer", *args, "--out", str(tmp_path / "b"))  # scripted, not only pick-lift
    assert (
        expert.returncode == 0
        and json.loads((tmp_path / "b" / "summary.json").read_text())["success_rate"] == 1.0
    )
    wrong = run_cli("rlinf-trainer", *args, "--policy", str(tmp_path), "--out", str(tmp_path / "c"))
    assert (
        wrong.returncode == 2 and "is not a saved policy" in wrong.stderr and "Traceback" not in wrong.stderr
    )
    # A policy of another env: the policy's fields are labelled as what is expected, the env's as the env's.
    other = run_cli("rlinf-trainer", "rollout", "--env", "rlinf/FrankaPickLift-v0", "--policy", str(policy),
                    "--out", str(tmp_path / "d"))  # fmt: skip
    last = other.stderr.strip().splitlines()[-1]
    assert other.returncode == 2 and "Traceback" not in other.stderr, other.stderr[-500:]
    assert last.startswith(f"error: the policy at {policy} does not fit env rlinf/FrankaPickLift-v0"), last
    expected, env_has = last.split("expected ", 1)[1].split("; env rlinf/FrankaPickLift-v0 has ")
    assert "goal_pos" in expected and "cube_pos" in env_has and "cube_pos" not in expected, last


def test_a_bug_keeps_its_traceback_and_a_user_error_is_one_line(monkeypatch, capsys):
    import trainer.cli as cli
    from protos.user_error import UserError

    def fails(error):
        def command(args):
            raise error

        return command

    parser = cli.build_parser

    def patched(error):
        def build():
            built = parser()
            built._subparsers._group_actions[0].choices["rollout"].set_defaults(func=fails(error))
            return built

        return build

    monkeypatch.setattr(cli, "build_parser", patched(UserError("bad --env")))
    assert cli.main(["rollout"]) == 2 and capsys.readouterr().err == "error: bad --env\n"
    monkeypatch.setattr(cli, "build_parser", patched(ValueError("an internal bug")))
    with pytest.raises(ValueError, match="an internal bug"):
        cli.main(["rollout"])


def test_serve_with_an_unwritable_record_dir_or_log_dir_is_one_line_at_start(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    for key in ("data.record_dir", "log_dir"):
        other = "log_dir" if key == "data.record_dir" else "data.record_dir"
        result = run_cli("rlinf-trainer", "serve", "--insecure", "server.host=127.0.0.1", "server.port=0",
                         f"{key}={tmp_path / 'file' / 'x'}", f"{other}={tmp_path / other}")  # fmt: skip
        last = result.stderr.strip().splitlines()[-1]
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-500:]
        assert last.startswith(f"error: {key}={tmp_path / 'file' / 'x'}: ") and "is not a folder" in last, (
            last
        )


def test_an_unwritable_folder_is_named_with_the_folder_in_the_way(tmp_path, monkeypatch):
    from trainer.configs import paths
    from trainer.configs.errors import ConfigError

    paths.require_writable_dir(
        tmp_path / "new" / "deeper", "run.output_dir"
    )  # makes nothing, refuses nothing
    assert not (tmp_path / "new").exists()
    # Permissions as a non-root user meets them (root passes every permission check).
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr(paths.os, "access", lambda path, mode: Path(path) != locked)
    with pytest.raises(ConfigError, match=r"run.output_dir=.*locked, on its way, is not writable"):
        paths.require_writable_dir(locked / "run", "run.output_dir")
    with pytest.raises(ConfigError, match=r"run.output_dir=.*locked: it is not writable"):
        paths.require_writable_dir(locked, "run.output_dir")


def test_serve_on_a_port_in_use_is_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("rlinf-trainer", "serve", "--insecure", "server.host=127.0.0.1", f"server.port={port}",
                         f"data.record_dir={tmp_path / 'ds'}", f"log_dir={tmp_path / 'log'}")  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"could not bind the robot link to 127.0.0.1:{port}" in last and f"grep :{port}" in last
    assert "give the agents that port in --server" in last


def test_help_names_the_presets_and_every_teleop_device():
    serve = run_cli("rlinf-trainer", "serve", "--help")
    assert serve.returncode == 0 and "cotrain_pick_lift" in serve.stdout
    connect = run_cli("rlinf-robot", "connect", "--help")
    assert connect.returncode == 0
    assert all(device in connect.stdout for device in ("spacemouse", "keyboard", "replay", "expert"))


def test_peers_going_away_print_our_log_lines_not_grpc_core_ones(tmp_path):
    """The agent killed outright, then the trainer stopped under a connected agent (a GOAWAY): each
    side reports it in its own log line; no gRPC C-core lines reach the terminal."""
    import os
    import signal
    import socket
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}

    def start(*argv, log):
        return subprocess.Popen(
            [str(bin_dir / argv[0]), *argv[1:]], cwd=ROOT, env=env, stdout=log, stderr=log
        )

    def wait_for(path: Path, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in path.read_text(errors="replace"):
            assert time.monotonic() < deadline, f"no {text!r} in {path.name}: {path.read_text()[-800:]}"
            time.sleep(0.2)

    serve_log, first_log, second_log = (tmp_path / f"{n}.log" for n in ("serve", "agent1", "agent2"))
    server_argv = ["rlinf-trainer", "serve", "--insecure", "server.host=127.0.0.1", f"server.port={port}",
                   f"data.record_dir={tmp_path / 'ds'}", f"log_dir={tmp_path / 'tb'}", "collect.policy=hold"]  # fmt: skip
    agent_argv = [
        "rlinf-robot",
        "connect",
        "--server",
        f"127.0.0.1:{port}",
        "--robot",
        "sim-twin",
        "--insecure",
    ]
    with open(serve_log, "w") as s_out, open(first_log, "w") as a_out, open(second_log, "w") as b_out:
        server = start(*server_argv, log=s_out)
        first = start(*agent_argv, log=a_out)
        second = None
        try:
            wait_for(serve_log, "registered")
            first.kill()
            wait_for(serve_log, "disconnected")
            second = start(*agent_argv, log=b_out)
            wait_for(serve_log, "registered: rlinf", timeout=60)
            wait_for(second_log, "connected to")
            server.send_signal(signal.SIGINT)
            server.wait(60)
            wait_for(second_log, "link to 127.0.0.1")
        finally:
            for proc in (first, second, server):
                if proc is not None and proc.poll() is None:
                    proc.kill()
    for path in (serve_log, second_log):
        text = path.read_text(errors="replace")
        assert ".cc:" not in text and "GOAWAY" not in text, text[-1500:]
