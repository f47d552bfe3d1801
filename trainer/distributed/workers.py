"""The three worker roles. Plain classes; :mod:`trainer.distributed.ppo_pipeline` makes them Ray actors.

Each keeps the seconds it spent working, so the loop can report a per-phase time breakdown.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from protos import EnvSpec
from trainer.algorithms.common import bootstrap_values


class Stopwatch:
    """Seconds spent inside ``with`` blocks: wall clock, and CPU time of the whole process."""

    def __init__(self) -> None:
        self.wall_s = self.cpu_s = 0.0

    def __enter__(self) -> Stopwatch:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s += time.perf_counter() - self._wall
        self.cpu_s += time.process_time() - self._cpu

    def totals(self) -> dict[str, float]:
        return {"wall_s": self.wall_s, "cpu_s": self.cpu_s}


def _settle(cpus: float, cores: tuple[int, ...] | None, threads: int | None = None) -> None:
    """Pin this worker to its bundle's cores (when the plan pins) and size torch's thread pool.

    A pinned worker gets a thread per core of its bundle: roles that share a bundle take turns
    (time-slicing), and each may use the whole bundle in its phase.
    """
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)
    torch.set_num_threads(threads or (len(cores) if cores else max(1, int(cpus))))


class EnvWorker:
    """One pipeline stage: a group of sim envs stepped in this process."""

    def __init__(self, env_id: str, num_envs: int, env_kwargs: dict[str, Any], cores=None) -> None:
        import sim_envs

        _settle(1.0, cores)
        self.venv = sim_envs.make_vector(env_id, num_envs, backend="inline", **env_kwargs)
        self.clock = Stopwatch()

    def reset(self, seed: int):
        with self.clock:
            obs, _ = self.venv.reset(seed=seed)
        return obs

    def step(self, act):
        """Play the actions of ``act`` (the rollout worker's reply) for every env of this stage."""
        out, _, _ = act
        with self.clock:
            result = self.venv.chunk_step(out.actions.numpy())
        return result

    def busy(self) -> dict[str, float]:
        return self.clock.totals()

    def pid(self) -> int:
        return os.getpid()


class RolloutWorker:
    """Policy inference for every stage; weights arrive from the actor with a version number."""

    def __init__(self, spec: dict, policy_config: dict, cpus: float = 1.0, cores=None) -> None:
        from policies import PolicyConfig, make_policy

        _settle(cpus, cores, threads=1)  # small inference batches: more threads only contend
        self.policy = make_policy(EnvSpec.from_dict(spec), PolicyConfig(**policy_config)).eval()
        self.version = 0
        self.clock = Stopwatch()

    def set_weights(self, state: dict, version: int) -> int:
        self.policy.load_state_dict(state)
        self.version = version
        return version

    @torch.no_grad()
    def act(self, previous):
        """Act on a reset's observation, or on the last step's result (its ``obs``).

        Returns (policy output, V(final obs) bootstraps of ``previous`` if it was a step, version).
        """
        with self.clock:
            is_step = not isinstance(previous, dict)
            obs = previous.obs if is_step else previous
            out = self.policy.act(obs, mode="sample")
            boot = bootstrap_values(self.policy, previous) if is_step else None
        return out, boot, self.version

    def finish(self, result) -> torch.Tensor:
        with self.clock:
            boot = bootstrap_values(self.policy, result)
        return boot

    def busy(self) -> dict[str, float]:
        return self.clock.totals()


class ActorWorker:
    """Gradient updates: PPO on the batches the loop hands over; publishes versioned weights."""

    def __init__(
        self, spec: dict, policy_config: dict, ppo_config: dict, seed: int, cpus: float = 1.0, cores=None
    ) -> None:
        from policies import PolicyConfig, make_policy
        from trainer.algorithms.ppo import PPO, PPOConfig

        _settle(cpus, cores)
        torch.manual_seed(seed)
        policy = make_policy(EnvSpec.from_dict(spec), PolicyConfig(**policy_config))
        self.ppo = PPO(policy, PPOConfig(**ppo_config))
        self.version = 0
        self.clock = Stopwatch()

    def weights(self) -> tuple[dict, int]:
        return self.ppo.policy.state_dict(), self.version

    def update(self, batch, behaviour_version: int) -> tuple[dict, dict, int]:
        with self.clock:
            self.ppo.policy.update_normalizers(batch.flat_obs())
            metrics = self.ppo.update(batch)
            metrics["policy_lag"] = float(self.version - behaviour_version)
            self.version += 1
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

    def busy(self) -> dict[str, float]:
        return self.clock.totals()
