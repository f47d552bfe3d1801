"""``rlinf-robot connect`` as a real process: bad input is one line; a good one serves and stops cleanly."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from protos import robot_link_pb2 as pb
from tests.integration.link_harness import start_server, wait_until

ROOT = Path(__file__).resolve().parents[2]
EXE = str(Path(sys.executable).with_name("rlinf-robot"))


def run(*args, timeout=60):
    return subprocess.run([EXE, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--robot", "sim-twin"], "needs TLS"),
        (["--robot", "ur5", "--insecure"], "unknown robot kind 'ur5'"),
        (["--robot", "sim-twin", "--tls-ca", "/nope.pem"], "--tls-ca /nope.pem does not exist"),
        (["--robot", "sim-twin", "--insecure", "--token-file", "/nope"], "--token-file /nope does not exist"),
        (["--robot", "sim-twin", "--insecure", "--teleop", "glove"], "unknown teleop device 'glove'"),
        (
            ["--robot", "sim-twin", "--insecure", "--teleop", "spacemouse"],
            "the spacemouse needs pyspacemouse",
        ),
    ],
)
def test_bad_input_is_a_one_line_error(args, message):
    result = run("connect", "--server", "127.0.0.1:1", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("driver_section", "message"),
    [
        ('task = "juggle"', "[driver] of sim-twin: unknown task 'juggle'; known:"),
        ('control_hz = "fast"', "sim-twin config.control_hz must be float, got 'fast'"),
    ],
)
def test_a_bad_driver_value_is_a_one_line_error(tmp_path, driver_section, message):
    (tmp_path / "robot.toml").write_text(f"[driver]\n{driver_section}\n")
    result = run("connect", "--server", "127.0.0.1:1", "--robot", "sim-twin", "--insecure",
                 "--robot-config", str(tmp_path / "robot.toml"))  # fmt: skip
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) <= 2


def test_an_unusable_spool_directory_is_one_line(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    result = run(
        "connect",
        "--server",
        "127.0.0.1:1",
        "--robot",
        "sim-twin",
        "--insecure",
        "--spool-dir",
        str(tmp_path / "file"),
    )
    assert result.returncode == 2 and "cannot use the spool directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_robot_config_names_the_key(tmp_path):
    def connect_with(config):
        return run(
            "connect",
            "--server",
            "127.0.0.1:1",
            "--robot",
            "sim-twin",
            "--insecure",
            "--robot-config",
            str(config),
        )

    config = tmp_path / "robot.json"
    config.write_text('{"driver": {"task": "reach", "colour": "red"}}')
    result = connect_with(config)
    assert result.returncode == 2 and "unknown key 'colour' in sim-twin config" in result.stderr
    config.write_text("[safety]\nmax_translation_m = -1\n")
    result = connect_with(config.rename(tmp_path / "robot.toml"))
    assert result.returncode == 2 and "max_translation_m must be > 0" in result.stderr
    # A wrong type is named with its key, not a TypeError from deep inside.
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[safety]\nworkspace_low = [0.2, "left", 0.02]\n[driver]\nimage_size = "big"\n')
    result = connect_with(wrong)
    assert (
        result.returncode == 2
        and "workspace_low must be tuple[float, float, float] | None, got [0.2, 'left'" in result.stderr
    )
    wrong.write_text('[driver]\nimage_size = "big"\n')
    result = connect_with(wrong)
    assert (
        result.returncode == 2 and "sim-twin config.image_size must be int, got 'big' (str)" in result.stderr
    )
    config = tmp_path / "teleop.json"
    config.write_text('{"teleop": {"kind": "replay", "path": "/nope.jsonl"}}')
    result = connect_with(config)
    assert result.returncode == 2 and "replay trace /nope.jsonl does not exist" in result.stderr


@pytest.mark.slow
def test_connect_registers_runs_and_stops_on_sigterm(tmp_path):
    server = start_server()
    config = tmp_path / "robot.toml"
    config.write_text(
        '[driver]\ntask = "reach"\nrobot = "ur5e"\ncontrol_hz = 20.0\nimage_size = 32\n\n[agent]\nrobot_id = "cli-twin"\n'
    )
    proc = subprocess.Popen(
        [EXE, "connect", "--server", f"127.0.0.1:{server.server.port}", "--robot", "sim-twin", "--insecure",
         "--robot-config", str(config), "--spool-dir", str(tmp_path / "spool")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        session = server.call(server.server.wait_for_robot("cli-twin", timeout=60))
        assert session.robot_kind == "sim-twin" and session.spec.camera("front").height == 32
        # The twin stands in for the arm its config names: a UR5e, six joints, in its own box.
        assert session.spec.name == "rlinf/UR5eReach-v0" and session.spec.metadata["robot"] == "ur5e"
        assert (
            session.spec.state_slices()["joint_pos"].stop - session.spec.state_slices()["joint_pos"].start
            == 6
        )
        server.loop.call_soon_threadsafe(lambda: session.send_command(pb.Command.START_EPISODE, seed=1))
        wait_until(lambda: session.latest is not None and session.latest.episode_id != "", what="an episode")
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)  # mid-episode: the agent stops and keeps the episode spooled
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
    assert proc.returncode == 0, stderr
    assert "WARNING: --insecure" in stderr
    assert "1 episode(s) wait in" in stderr
    trainer = f"127.0.0.1_{server.server.port}"  # one spool per trainer address
    assert len(list((tmp_path / "spool" / trainer / "cli-twin").glob("*/end.bin"))) == 1


def test_toml_robot_configs_load_without_tomllib_as_on_python_3_10(tmp_path, monkeypatch):
    from robot_agent.config import load_config_file

    config = tmp_path / "robot.toml"
    config.write_text("[safety]\nmax_translation_m = 0.02\n")
    monkeypatch.setitem(sys.modules, "tomllib", None)  # import tomllib raises ImportError, as on 3.10
    assert load_config_file(config) == {"safety": {"max_translation_m": 0.02}}


def test_an_agent_without_a_robot_id_takes_its_hosts_name_and_driver(monkeypatch):
    import socket

    from robot_agent.cli import agent_config_from_args, build_parser
    from robot_agent.spool import spool_folder

    monkeypatch.setattr(socket, "gethostname", lambda: "Lab PC#3.example.org")
    args = build_parser().parse_args(
        ["connect", "--server", "10.0.0.5:50051", "--robot", "sim-twin", "--insecure"]
    )
    assert agent_config_from_args(args, {}).robot_id == "Lab-PC-3-sim-twin"
    assert agent_config_from_args(args, {"agent": {"robot_id": "left-arm"}}).robot_id == "left-arm"
    named = build_parser().parse_args(
        ["connect", "--server", "h:1", "--robot", "sim-twin", "--robot-id", "r2", "--insecure"]
    )
    assert agent_config_from_args(named, {}).robot_id == "r2"
    monkeypatch.setattr(socket, "gethostname", lambda: "...")
    assert agent_config_from_args(args, {}).robot_id == "robot-sim-twin"
    # Two trainers, two spools: an episode recorded for one is never uploaded to the other.
    assert spool_folder("/s", "10.0.0.5:50051", "r") != spool_folder("/s", "10.0.0.6:50051", "r")
    assert spool_folder("/s", "[::1]:50051", "r").parent.name == "___1__50051"
