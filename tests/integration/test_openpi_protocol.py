"""Robots that run openpi's own client (``openpi_client.WebsocketClientPolicy``, openpi-client 0.1.2
from PyPI, in its side venv) get actions from a policy of ours through ``serve server.mode=eval``:
the actions equal what our own ``act`` gives on the same observation; the API key, TLS and the
observation's sizes are enforced."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.integration.test_serve import ServeThread, free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CLIENT_PYTHON = ROOT / ".venv-openpi" / "bin" / "python"
PEER = Path(__file__).with_name("openpi_client_peer.py")
TWIN = {"task": "reach", "image_size": 64, "max_episode_steps": 20}
PROMPT = "reach the target"
# openpi's client (websockets' sync connect) gives the server 10 s to answer the upgrade
HANDSHAKE_TIMEOUT = "TimeoutError: timed out while waiting for handshake response"


@pytest.fixture(scope="module")
def client_python() -> Path:
    if not CLIENT_PYTHON.exists():
        pytest.skip("no openpi client venv: bash scripts/openpi_client_venv.sh (CI builds it)")
    return CLIENT_PYTHON


def saved_policy(folder: Path, kind: str):
    """A policy of ours for the twin's spec (a state MLP, or a tiny VLA on the front camera)."""
    import torch

    from policies.config import PolicyConfig
    from policies.factory import make_policy
    from robot_agent.drivers import make_driver

    driver = make_driver("sim-twin", TWIN)
    torch.manual_seed(0)
    config = {
        "mlp": {"kind": "mlp", "hidden_sizes": [32]},
        # tiny:pi0: its chunk is continuous, so its actions differ step to step (an OFT at random
        # weights can give one bin for them all, which would hide a chunk played out of order)
        "vla": {"kind": "vla", "cameras": ["front"], "chunk_size": 4, "vla": {"backbone": "tiny:pi0"}},
    }
    policy = make_policy(driver.spec, PolicyConfig(**config[kind]))
    driver.close()
    policy.save(folder)
    return policy.spec


def openpi_observations(spec, count: int, seed: int = 0, image_shape=None) -> list[dict]:
    """What a robot running openpi's client sends: images by openpi's key names, the state, the prompt."""
    rng = np.random.default_rng(seed)
    shape = image_shape or spec.camera("front").shape
    return [
        {
            "observation/image": rng.integers(0, 256, shape, dtype=np.uint8),
            "observation/state": rng.uniform(-0.5, 0.5, spec.state_dim).astype(np.float32),
            "prompt": PROMPT,
        }
        for _ in range(count)
    ]


def run_client(
    python: Path, uri: str, observations: list[dict], tmp_path: Path, api_key: str | None = None, env=None
):
    arrays, layout = {}, []
    for i, obs in enumerate(observations):
        entry = {}
        for key, value in obs.items():
            if isinstance(value, np.ndarray):
                arrays[f"a{i}_{len(entry)}"] = value
                entry[key] = f"a{i}_{len(entry)}"
            else:
                entry[key] = value
        layout.append(entry)
    arrays["keys.json"] = np.frombuffer(json.dumps({"observations": layout}).encode(), np.uint8)
    np.savez(tmp_path / "obs.npz", **arrays)
    out = tmp_path / "actions.npz"
    out.unlink(missing_ok=True)
    argv = [str(python), str(PEER), uri, str(tmp_path / "obs.npz"), str(out), *([api_key] if api_key else [])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    if HANDSHAKE_TIMEOUT in done.stdout:  # once: a loaded 2-core CI box can miss the client's 10 s
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    return done, (np.load(out) if out.exists() else None)


def ours(policy_path: Path, observations: list[dict]) -> np.ndarray:
    """Our own greedy act on the same observations, as eval mode drives a robot of ours."""
    from policies.factory import load_policy
    from trainer.server.policy_driver import PolicyDriver

    driver = PolicyDriver(load_policy(policy_path), greedy=True)
    try:
        return np.stack([
            driver.act({"images": {"front": o["observation/image"]}, "state": o["observation/state"],
                        "instruction": o["prompt"]})
            for o in observations
        ])  # fmt: skip
    finally:
        driver.close()


@pytest.mark.parametrize("kind", ["mlp", "vla"])
def test_openpis_client_gets_our_policys_actions(tmp_path, client_python, kind, caplog):
    spec = saved_policy(tmp_path / "policy", kind)
    port = free_port()
    images = "{observation/image: front}" if kind == "vla" else "{}"
    served = ServeThread(tmp_path, "server.mode=eval", f"eval.policy_path={tmp_path / 'policy'}", "eval.robots=0",
                         f"openpi.port={port}", f"openpi.images={images}")  # fmt: skip
    observations = openpi_observations(spec, 4)
    try:
        done, answer = run_client(client_python, f"127.0.0.1:{port}", observations, tmp_path)
    finally:
        served.stop()
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    metadata = json.loads(done.stdout.splitlines()[0])
    assert metadata["server"] == "rlinf" and metadata["action_dim"] == spec.action.dim
    expected = ours(tmp_path / "policy", observations)
    assert answer["actions"].shape == expected.shape == (4, 4 if kind == "vla" else 1, spec.action.dim)
    np.testing.assert_allclose(answer["actions"], expected, atol=1e-6)
    assert len(set(map(bytes, answer["actions"]))) > 1  # the answers follow the observations
    warned = [r for r in caplog.records if "none of rlinf-robot's local safety" in r.getMessage()]
    assert len(warned) == 1  # once for the connection, not per message


def test_the_api_key_and_tls_are_enforced_and_a_bad_observation_is_named(tmp_path, client_python):
    import os

    from tests.integration.certs import make_pki

    spec = saved_policy(tmp_path / "policy", "vla")
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    (tmp_path / "token").write_text("a-long-shared-token-123")
    port = free_port()
    served = ServeThread(
        tmp_path, "server.mode=eval", f"eval.policy_path={tmp_path / 'policy'}", "eval.robots=0",
        f"openpi.port={port}", "openpi.images={observation/image: front}", "server.insecure=false",
        f"server.tls_cert={pki.server_cert}", f"server.tls_key={pki.server_key}", f"server.token_file={tmp_path / 'token'}",
    )  # fmt: skip
    trusts_our_ca = {**os.environ, "SSL_CERT_FILE": str(pki.ca)}  # the robot's CA bundle
    uri = f"wss://localhost:{port}"
    try:
        good, answer = run_client(client_python, uri, openpi_observations(spec, 2), tmp_path, "a-long-shared-token-123",
                                  env=trusts_our_ca)  # fmt: skip
        wrong_key, _ = run_client(
            client_python, uri, openpi_observations(spec, 1), tmp_path, "guess", env=trusts_our_ca
        )
        no_tls, _ = run_client(client_python, f"127.0.0.1:{port}", openpi_observations(spec, 1), tmp_path,
                               "a-long-shared-token-123")  # fmt: skip
        bad, _ = run_client(client_python, uri, openpi_observations(spec, 1, image_shape=(32, 32, 3)), tmp_path,
                            "a-long-shared-token-123", env=trusts_our_ca)  # fmt: skip
    finally:
        served.stop()
    assert good.returncode == 0 and answer["actions"].shape == (2, 4, spec.action.dim), (
        good.stdout + good.stderr
    )
    assert wrong_key.returncode == 3 and "401" in wrong_key.stdout, wrong_key.stdout
    assert no_tls.returncode == 3, no_tls.stdout  # plain ws to a wss server: no answer
    assert bad.returncode == 3 and "RuntimeError" in bad.stdout, bad.stdout
    assert "'observation/image' must be uint8[64, 64, 3] (camera 'front'), got uint8[32, 32, 3]" in bad.stdout


def test_observations_are_checked_before_the_policy_sees_them():
    """The mapping and bounds on what such a robot sends (no client needed)."""
    from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
    from trainer.server.openpi_server import (
        ObservationError,
        OpenpiMapping,
        max_message_bytes,
        to_observation,
    )

    spec = EnvSpec(
        name="t", cameras=(CameraSpec("front", 8, 8, 10.0),), state_fields=(StateField("q", 3),),
        action=ee_delta_action_space(rotation=False), control_hz=10.0, instruction="lift it", max_episode_steps=5,
    )  # fmt: skip
    mapping = OpenpiMapping({"cam": "front"}, state="s", prompt="p")
    image = np.zeros((8, 8, 3), np.uint8)
    obs = to_observation({"cam": image, "s": np.ones(3, np.float32)}, spec, mapping)
    assert obs["instruction"] == "lift it" and obs["state"].dtype == np.float32  # the spec's instruction
    for message, reason in [
        ({"s": np.ones(3)}, "lacks ['cam']"),
        ({"cam": image, "s": np.array([1.0, np.nan, 0.0])}, "3 finite numbers"),
        ({"cam": image, "s": np.ones(4)}, "3 finite numbers"),
        ({"cam": image, "s": ["a", "b", "c"]}, "3 finite numbers"),
        ({"cam": image.astype(np.float32), "s": np.ones(3)}, "must be uint8[8, 8, 3]"),
        ({"cam": image, "s": np.ones(3), "p": "x" * 5000}, "at most 4096 characters"),
        ({f"k{i}": 0 for i in range(100)}, "at most 64 keys"),
    ]:
        with pytest.raises(ObservationError, match=reason.replace("[", r"\[").replace("]", r"\]")):
            to_observation(message, spec, mapping)
    assert max_message_bytes(spec) < 200_000  # a frame bigger than the spec allows is refused unread
