"""The three worker roles. Plain classes; :mod:`trainer.distributed.ppo_pipeline` makes them Ray actors.

Each keeps the seconds it spent working, so the loop can report a per-phase time breakdown.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from protos import EnvSpec


def _threads(cpus: float) -> None:
    torch.set_num_threads(max(1, int(cpus)))


class EnvWorker:
    """One pipeline stage: a group of sim envs stepped in this process."""

    def __init__(self, env_id: str, num_envs: int, env_kwargs: dict[str, Any]) -> None:
        import sim_envs

        self.venv = sim_envs.make_vector(env_id, num_envs, backend="inline", **env_kwargs)
        self.busy_s = 0.0

    def reset(self, seed: int):
        tick = time.perf_counter()
        obs, _ = self.venv.reset(seed=seed)
        self.busy_s += time.perf_counter() - tick
        return obs

    def step(self, act):
        """Play the actions of ``act`` (the rollout worker's reply) for every env of this stage."""
        out, _, _ = act
        tick = time.perf_counter()
        result = self.venv.chunk_step(out.actions.numpy())
        self.busy_s += time.perf_counter() - tick
        return result

    def busy(self) -> float:
        return self.busy_s

    def pid(self) -> int:
        return os.getpid()


class RolloutWorker:
    """Policy inference for every stage; weights arrive from the actor with a version number."""

    def __init__(self, spec: dict, policy_config: dict, cpus: float = 1.0) -> None:
        from policies import PolicyConfig, make_policy

        _threads(cpus)
        self.policy = make_policy(EnvSpec.from_dict(spec), PolicyConfig(**policy_config)).eval()
        self.version = 0
        self.busy_s = 0.0

    def set_weights(self, state: dict, version: int) -> int:
        self.policy.load_state_dict(state)
        self.version = version
        return version

    @torch.no_grad()
    def act(self, previous):
        """Act on a reset's observation, or on the last step's result (its ``obs``).

        Returns (policy output, V(final obs) bootstraps of ``previous`` if it was a step, version).
        """
        from trainer.algorithms.common import bootstrap_values

        tick = time.perf_counter()
        is_step = not isinstance(previous, dict)
        obs = previous.obs if is_step else previous
        out = self.policy.act(obs, mode="sample")
        boot = bootstrap_values(self.policy, previous) if is_step else None
        self.busy_s += time.perf_counter() - tick
        return out, boot, self.version

    def finish(self, result) -> torch.Tensor:
        from trainer.algorithms.common import bootstrap_values

        tick = time.perf_counter()
        boot = bootstrap_values(self.policy, result)
        self.busy_s += time.perf_counter() - tick
        return boot

    def busy(self) -> float:
        return self.busy_s


class ActorWorker:
    """Gradient updates: PPO on the batches the loop hands over; publishes versioned weights."""

    def __init__(
        self, spec: dict, policy_config: dict, ppo_config: dict, seed: int, cpus: float = 1.0
    ) -> None:
        from policies import PolicyConfig, make_policy
        from trainer.algorithms.ppo import PPO, PPOConfig

        _threads(cpus)
        torch.manual_seed(seed)
        policy = make_policy(EnvSpec.from_dict(spec), PolicyConfig(**policy_config))
        self.ppo = PPO(policy, PPOConfig(**ppo_config))
        self.version = 0
        self.busy_s = 0.0

    def weights(self) -> tuple[dict, int]:
        return self.ppo.policy.state_dict(), self.version

    def update(self, batch, behaviour_version: int) -> tuple[dict, dict, int]:
        tick = time.perf_counter()
        self.ppo.policy.update_normalizers(batch.flat_obs())
        metrics = self.ppo.update(batch)
        metrics["policy_lag"] = float(self.version - behaviour_version)
        self.version += 1
        self.busy_s += time.perf_counter() - tick
        return metrics, self.ppo.policy.state_dict(), self.version

    def state(self) -> dict:
        return {
            "policy": self.ppo.policy.state_dict(),
            "algorithm": self.ppo.state_dict(),
            "version": self.version,
        }

    def load_state(self, state: dict) -> None:
        self.ppo.policy.load_state_dict(state["policy"])
        self.ppo.load_state_dict(state["algorithm"])
        self.version = state["version"]

    def busy(self) -> float:
        return self.busy_s
