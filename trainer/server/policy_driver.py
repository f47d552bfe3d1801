"""A saved policy driving robots over the link: decoding and inference off the event loop."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from policies import Policy
from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import spec_mismatch
from trainer.server.episode_runner import RemotePolicy
from trainer.server.session import RobotSession


def checkpoint_version(path: str | Path) -> int:
    """The env steps in a checkpoint's path (``.../step_<N>/policy`` -> N), else 0: a policy's version."""
    for part in reversed(Path(path).parts):
        match = re.fullmatch(r"step_(\d+)", part)
        if match:
            return int(match.group(1))
    return 0


class PolicyDriver:
    """Turns a policy into a :data:`RemotePolicy` per robot; ``policy`` may be swapped between episodes.

    ``version`` goes out with every chunk (the agent records it per step): a checkpoint's env steps
    in eval, the round in DAgger."""

    def __init__(self, policy: Policy, greedy: bool = True, version: int = 0) -> None:
        self.policy = policy.eval()
        self.version = version
        self.mode = "greedy" if greedy else "sample"
        self.inference = ThreadPoolExecutor(1, thread_name_prefix="policy-inference")

    def incompatibility(self, session: RobotSession) -> str | None:
        """Why this policy cannot drive this robot, or None."""
        problem = spec_mismatch(self.policy.spec, session.spec, f"robot {session.robot_id}")
        return None if problem is None else f"the policy does not fit: {problem}"

    def act(self, obs: dict) -> np.ndarray:
        """One observation (``images``, ``state``, ``instruction``) -> its action chunk ``[chunk, dim]``."""
        import torch

        from policies.base import to_tensors

        policy = self.policy
        batch = {
            "images": {name: obs["images"][name][None] for name in policy.cameras},  # what it reads
            "state": np.asarray(obs["state"], np.float32)[None],
            "instruction": [obs["instruction"]],
        }
        with torch.no_grad():
            return policy.act(to_tensors(batch), mode=self.mode).actions[0].cpu().numpy()

    async def act_async(self, obs: dict) -> np.ndarray:
        """:meth:`act` on the inference thread (the event loop stays free)."""
        return await asyncio.get_running_loop().run_in_executor(self.inference, self.act, obs)

    def remote_policy(self, session: RobotSession) -> RemotePolicy:
        def infer(obs: pb.Observation) -> np.ndarray:
            images = link_codec.decode_images(obs.frames, session.spec)
            return self.act({"images": images, "state": obs.state, "instruction": obs.instruction})

        async def remote(obs: pb.Observation) -> np.ndarray:
            return await asyncio.get_running_loop().run_in_executor(self.inference, infer, obs)

        return remote

    def close(self) -> None:
        self.inference.shutdown(wait=False)
