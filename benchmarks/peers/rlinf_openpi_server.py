"""Our server of openpi's protocol (``trainer/server/openpi_server.py``) with a policy that answers a
zero chunk of 50 x 7, as ``openpi_peer.py serve`` does: ``link_compare.py`` times openpi's own client
against it, beside openpi's client against openpi's server, on the same payload. Runs in the main venv.

    python rlinf_openpi_server.py PORT_FILE
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from policies.base import Policy, PolicyOutput
from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
from trainer.server.auth import ServerAuthConfig
from trainer.server.openpi_server import OpenpiMapping, OpenpiPolicyServer
from trainer.server.policy_driver import PolicyDriver

SPEC = EnvSpec(
    name="openpi-payload",
    cameras=(CameraSpec("image", 480, 640, 30.0), CameraSpec("wrist_image", 480, 640, 30.0)),
    state_fields=(StateField("state", 16),),
    action=ee_delta_action_space(rotation=True),
    control_hz=30.0,
    instruction="pick up the cube",
    max_episode_steps=300,
)


class ZeroChunk(Policy):
    """Reads both cameras and the state, answers zeros: the link's cost alone, as the peer's server."""

    def __init__(self) -> None:
        torch.nn.Module.__init__(self)
        self.spec, self.chunk_size = SPEC, 50

    @property
    def cameras(self) -> list[str]:
        return ["image", "wrist_image"]

    def act(self, obs, mode: str = "sample") -> PolicyOutput:
        batch = obs["state"].shape[0]
        zeros = torch.zeros(batch, self.chunk_size, SPEC.action.dim)
        return PolicyOutput(zeros, zeros, torch.zeros(batch), None)

    def evaluate(self, obs, samples):
        raise NotImplementedError

    def config_dict(self) -> dict:
        return {}


async def main(port_file: str) -> None:
    mapping = OpenpiMapping({"observation/image": "image", "observation/wrist_image": "wrist_image"})
    server = OpenpiPolicyServer(
        PolicyDriver(ZeroChunk()), mapping, ServerAuthConfig(insecure=True), "127.0.0.1", 0
    )
    stop, started = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(server.run(stop, started))
    await started.wait()
    Path(port_file).write_text(str(server.bound_port))
    await task


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
