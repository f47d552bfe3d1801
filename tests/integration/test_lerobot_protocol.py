"""Robots that run LeRobot's own async-inference client (``lerobot.async_inference.RobotClient``,
lerobot 0.6.1 in the LeRobot side venv) get actions from a policy of ours through
``serve server.mode=eval``: the chunks equal what our own ``act`` gives on the same observation, the
robot carries them out, and a setup that does not fit or an address not allowed is refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.integration.test_openpi_protocol import saved_policy
from tests.integration.test_serve import ServeThread, free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CLIENT_PYTHON = ROOT / ".venv-lerobot" / "bin" / "python"
PEER = Path(__file__).with_name("lerobot_client_peer.py")
TASK = "reach the target"
CHUNKS = 3


@pytest.fixture(scope="module")
def client_python() -> Path:
    done = subprocess.run(
        [str(CLIENT_PYTHON), "-c", "import lerobot.async_inference.configs"], capture_output=True
    ) if CLIENT_PYTHON.exists() else None  # fmt: skip
    if done is None or done.returncode != 0:
        pytest.skip("no LeRobot side venv with lerobot[async]: bash scripts/lerobot_venv.sh (CI builds it)")
    return CLIENT_PYTHON


def run_client(python: Path, port: int, spec, state, image, tmp_path: Path, state_dim: int | None = None):
    arrays = {
        "state": np.asarray(state, np.float32)[: state_dim or len(state)],
        "task": np.frombuffer(TASK.encode(), np.uint8),
    }
    if image is not None:
        arrays["image"] = image
    np.savez(tmp_path / "obs.npz", **arrays)
    out = tmp_path / "actions.npz"
    out.unlink(missing_ok=True)
    argv = [
        str(python),
        str(PEER),
        f"127.0.0.1:{port}",
        str(tmp_path / "obs.npz"),
        str(out),
        str(CHUNKS),
        str(spec.action.dim),
    ]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )  # LeRobot logs to ./logs
    return done, (np.load(out) if out.exists() else None)


def ours(policy_path: Path, state, image) -> np.ndarray:
    from policies.factory import load_policy
    from trainer.server.policy_driver import PolicyDriver

    driver = PolicyDriver(load_policy(policy_path), greedy=True)
    try:
        images = {"front": image} if image is not None else {}
        return driver.act({"images": images, "state": np.asarray(state, np.float32), "instruction": TASK})
    finally:
        driver.close()


@pytest.mark.parametrize("kind", ["mlp", "vla"])
def test_lerobots_client_gets_and_carries_out_our_policys_actions(tmp_path, client_python, kind, caplog):
    spec = saved_policy(tmp_path / "policy", kind)
    rng = np.random.default_rng(1)
    state = rng.uniform(-0.5, 0.5, spec.state_dim)
    image = rng.integers(0, 256, spec.camera("front").shape, dtype=np.uint8) if kind == "vla" else None
    port = free_port()
    served = ServeThread(tmp_path, "server.mode=eval", f"eval.policy_path={tmp_path / 'policy'}", "eval.robots=0",
                         f"lerobot.port={port}", f"lerobot.images={'{front: front}' if kind == 'vla' else '{}'}")  # fmt: skip
    try:
        done, answer = run_client(client_python, port, spec, state, image, tmp_path)
    finally:
        served.stop()
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert str(answer["dtype"]) == "torch.float32"  # LeRobot's own TimedAction of torch tensors
    expected = ours(tmp_path / "policy", state, image)[:3]  # the client asked for at most 3 a chunk
    assert answer["chunks"].shape == (CHUNKS, 3 if kind == "vla" else 1, spec.action.dim)
    assert len(set(map(bytes, expected))) == len(expected)  # a chunk's actions differ from each other
    for chunk in answer["chunks"]:
        np.testing.assert_allclose(chunk, expected, atol=1e-6)
    assert all(np.diff(steps).tolist() == [1] * (len(expected) - 1) for steps in answer["timesteps"])
    carried_out = answer["carried_out"]  # what LeRobot's robot was sent, action by action
    assert len(carried_out) >= len(expected)
    np.testing.assert_allclose(carried_out[: len(expected)], expected, atol=1e-6)
    warned = [r for r in caplog.records if "none of rlinf-robot's local safety" in r.getMessage()]
    assert len(warned) == 1  # once for the connection, not per message


def test_a_setup_that_does_not_fit_and_an_address_not_allowed_are_refused(tmp_path, client_python, caplog):
    spec = saved_policy(tmp_path / "policy", "mlp")
    state = np.zeros(spec.state_dim)
    port = free_port()
    served = ServeThread(tmp_path, "server.mode=eval", f"eval.policy_path={tmp_path / 'policy'}", "eval.robots=0",
                         f"lerobot.port={port}")  # fmt: skip
    try:
        short, _ = run_client(client_python, port, spec, state, None, tmp_path, state_dim=spec.state_dim - 1)
    finally:
        served.stop()
    assert short.returncode == 3, short.stdout + short.stderr[-2000:]
    assert "FAILED_PRECONDITION" in short.stderr and f"the policy reads {spec.state_dim}" in short.stderr
    port = free_port()
    served = ServeThread(tmp_path, "server.mode=eval", f"eval.policy_path={tmp_path / 'policy'}", "eval.robots=0",
                         f"lerobot.port={port}", "lerobot.allowed_peers=[10.9.9.0/24]")  # fmt: skip
    try:
        outsider, _ = run_client(client_python, port, spec, state, None, tmp_path)
    finally:
        served.stop()
    assert outsider.returncode == 3 and "PERMISSION_DENIED" in outsider.stderr, outsider.stderr[-2000:]
    assert "not in lerobot.allowed_peers" in outsider.stderr
