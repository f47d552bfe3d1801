"""A saved policy driving robots over the link: decoding and inference off the event loop."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from policies import Policy
from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import spec_mismatch
from trainer.server.episode_runner import RemotePolicy
from trainer.server.session import RobotSession


class PolicyDriver:
    """Turns a policy into a :data:`RemotePolicy` per robot; ``policy`` may be swapped between episodes."""

    def __init__(self, policy: Policy, greedy: bool = True) -> None:
        self.policy = policy.eval()
        self.mode = "greedy" if greedy else "sample"
        self.inference = ThreadPoolExecutor(1, thread_name_prefix="policy-inference")

    def incompatibility(self, session: RobotSession) -> str | None:
        """Why this policy cannot drive this robot, or None."""
        problem = spec_mismatch(self.policy.spec, session.spec, f"robot {session.robot_id}")
        return None if problem is None else f"the policy does not fit: {problem}"

    def remote_policy(self, session: RobotSession) -> RemotePolicy:
        import torch

        from policies.base import to_tensors

        def infer(obs: pb.Observation) -> np.ndarray:
            policy = self.policy
            images = link_codec.decode_images(obs.frames, session.spec)
            batch = {
                "images": {name: images[name][None] for name in policy.spec.camera_names},
                "state": np.asarray(obs.state, np.float32)[None],
                "instruction": [obs.instruction],
            }
            with torch.no_grad():
                return policy.act(to_tensors(batch), mode=self.mode).actions[0].cpu().numpy()

        async def remote(obs: pb.Observation) -> np.ndarray:
            return await asyncio.get_running_loop().run_in_executor(self.inference, infer, obs)

        return remote

    def close(self) -> None:
        self.inference.shutdown(wait=False)
