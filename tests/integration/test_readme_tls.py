"""The docs' certificate commands (docs/guides/robot.md) make a PKI the link accepts; a robot given the wrong CA stops
with one line and exit code 3 (``rlinf-robot connect`` as a real process)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.link_harness import start_server, wait_until
from trainer.server.auth import ServerAuthConfig

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
ROBOT = str(Path(sys.executable).with_name("rlinf-robot"))


def readme_certificate_commands() -> list[str]:
    text = (ROOT / "docs" / "guides" / "robot.md").read_text()
    block = text[text.index("## Certificates for a lab") :]
    start = block.index("```bash") + len("```bash")
    return [line for line in block[start : block.index("```", start)].splitlines() if line.strip()]


def make_pki(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for line in readme_certificate_commands():
        subprocess.run(["bash", "-c", line], cwd=folder, check=True, capture_output=True, timeout=60)
    return folder


def test_the_readmes_certificates_admit_a_robot_and_a_wrong_ca_is_one_line_exit_3(tmp_path):
    lab, other = make_pki(tmp_path / "lab"), make_pki(tmp_path / "other")
    auth = ServerAuthConfig(
        tls_cert=str(lab / "server.pem"), tls_key=str(lab / "server.key"), client_ca=str(lab / "ca.pem")
    )
    server = start_server(auth)
    twin = tmp_path / "twin.json"
    twin.write_text(json.dumps({"driver": {"task": "reach", "cameras": []}}))

    def connect(ca: Path, name: str) -> subprocess.Popen:
        return subprocess.Popen(
            [ROBOT, "connect", "--server", f"localhost:{server.server.port}", "--robot", "sim-twin",
             "--robot-config", str(twin), "--tls-ca", str(ca), "--tls-cert", str(lab / "robot.pem"),
             "--tls-key", str(lab / "robot.key"), "--robot-id", "franka-left", "--spool-dir", str(tmp_path / name)],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    robot = connect(lab / "ca.pem", "good")
    try:
        wait_until(lambda: "franka-left" in server.server.sessions, timeout=60, what="the robot to register")
        robot.send_signal(signal.SIGINT)
        assert robot.wait(30) == 0
        wrong = connect(other / "ca.pem", "wrong")
        assert wrong.wait(60) == 3
        lines = wrong.stderr.read().strip().splitlines()
        assert lines[-1].startswith(f"rlinf-robot: TLS with localhost:{server.server.port} failed")
        assert not any("Traceback" in line or "ssl_transport" in line for line in lines)
    finally:
        if robot.poll() is None:
            robot.kill()
        server.stop()
