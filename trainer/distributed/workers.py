"""The worker roles. Plain classes; :mod:`trainer.distributed.on_policy` and
:mod:`trainer.distributed.off_policy` make them Ray actors.

Each keeps the seconds it spent working, so the loop can report a per-phase time breakdown. Models
live on the worker's device: ``cuda`` when Ray gave the worker a GPU share, else the CPU. What
leaves a worker (actions, weights, checkpoint state) is on the CPU.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from protos import EnvSpec
from trainer.algorithms.common import TrajectoryBuilder, bootstrap_values, concat_batches
from trainer.devices import CPU, move_placed, to_cpu, worker_device
from trainer.distributed.payload import payload_bytes


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


def settle_threads(cpus: float, cores: tuple[int, ...] | None, threads: int | None = None) -> None:
    """Pin this worker to its bundle's cores (when the plan pins) and size torch's thread pool.

    A pinned worker gets a thread per core of its bundle: roles that share a bundle take turns
    (time-slicing), and each may use the whole bundle in its phase.
    """
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)
    torch.set_num_threads(threads or (len(cores) if cores else max(1, int(cpus))))


@dataclass
class Decision:
    """The rollout worker's reply for one stage: what its envs play, and what the learner needs."""

    env_actions: np.ndarray  # [N, chunk, A] in env units
    version: int  # the weights version that chose them
    output: Any = None  # on-policy: the PolicyOutput (samples, log-probs, values)
    bootstrap: torch.Tensor | None = None  # on-policy: V(final obs) of the previous step's truncations
    unit_actions: np.ndarray | None = None  # off-policy: the actions in [-1, 1], as stored in replay


def build_algorithm(spec: dict, policy_config: dict, algorithm: str, algo_config: dict, seed: int, device):
    """A learning worker's algorithm: a fresh policy from ``seed`` on ``device``, and its optimisers."""
    from policies import make_policy
    from trainer.algorithms.registry import algorithm_class

    torch.manual_seed(seed)
    policy = make_policy(EnvSpec.from_dict(spec), policy_config).to(device)
    cls = algorithm_class(algorithm)
    return cls(policy, cls.config_class(**algo_config))


class Worker:
    """What every role reports: seconds spent working, its process and its Ray node; and, for roles
    with a model, moving it to host memory and back (collocated placement's offload)."""

    clock: Stopwatch
    device: torch.device = CPU

    def busy(self) -> dict[str, float]:
        return self.clock.totals()

    def placed_state(self) -> tuple[list[nn.Module], list[torch.optim.Optimizer]]:
        """The models and optimisers that live on this worker's device (none for env workers)."""
        return [], []

    def offload(self) -> float:
        """Move the models and optimiser state to host memory and free the device's cache; seconds."""
        return self._move_to(CPU)

    def onload(self) -> float:
        """Bring them back to the worker's device; seconds."""
        return self._move_to(self.device)

    def _move_to(self, device: torch.device) -> float:
        tick = time.perf_counter()
        move_placed(*self.placed_state(), device, home=self.device)
        return time.perf_counter() - tick

    def device_memory(self) -> int:
        """Bytes this process holds in tensors on its GPU (0 on the CPU)."""
        return torch.cuda.memory_allocated() if self.device.type == "cuda" else 0

    def device_name(self) -> str:
        return str(self.device)

    def pid(self) -> int:
        return os.getpid()

    def set_cores(self, cores: tuple[int, ...] | None, threads: int) -> None:
        """A dynamic re-plan's cores and thread count for this worker (between iterations)."""
        settle_threads(float(threads), cores, threads)

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


class EnvWorker(Worker):
    """One pipeline stage: a group of sim envs stepped in this process."""

    def __init__(self, env_id: str, num_envs: int, env_kwargs: dict[str, Any], cores=None) -> None:
        import sim_envs

        settle_threads(1.0, cores)
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs)
        self.venv = sim_envs.make_vector(env_id, num_envs, backend="inline", **env_kwargs)
        self.clock = Stopwatch()

    def resize(self, num_envs: int, env_kwargs: dict[str, Any] | None = None) -> int:
        """Rebuild this stage with ``num_envs`` envs (and new kwargs, if given). Stages hold no state
        between iterations (each starts with a reset), so this is safe between iterations."""
        import sim_envs

        self.env_kwargs = dict(env_kwargs if env_kwargs is not None else self.env_kwargs)
        self.venv.close()
        self.venv = sim_envs.make_vector(self.env_id, num_envs, backend="inline", **self.env_kwargs)
        return num_envs

    def reset(self, seed: int, seeds: list[int] | None = None):
        """Env ``i`` resets from ``seed + i``, or from ``seeds[i]`` (GRPO's shared group seeds)."""
        with self.clock:
            obs, _ = self.venv.reset(seed=seed, seeds=seeds)
        return obs

    def step(self, decision: Decision):
        """Play the rollout worker's decision for every env of this stage."""
        with self.clock:
            result = self.venv.chunk_step(decision.env_actions)
        return result


class RolloutWorker(Worker):
    """Policy inference for every stage; weights arrive from the actor with a version number."""

    def __init__(self, spec: dict, policy_config: dict, cpus: float = 1.0, cores=None) -> None:
        from policies import make_policy

        settle_threads(cpus, cores, threads=1)  # small inference batches: more threads only contend
        self.device = worker_device()
        self.policy = make_policy(EnvSpec.from_dict(spec), policy_config)
        self.policy.eval().to(self.device)
        self.version = 0
        self.clock = Stopwatch()

    def placed_state(self):
        return [self.policy], []

    def set_weights(self, state: dict, version: int) -> int:
        self.policy.load_state_dict(state)
        self.version = version
        return version

    def load_weights(self, versioned: tuple[dict, int]) -> int:
        """``set_weights`` on the (weights, version) pair a learner's ``weights`` call returns."""
        return self.set_weights(*versioned)

    @torch.no_grad()
    def act(self, previous) -> Decision:
        """On-policy: sample on a reset's observation, or on the last step's result (its ``obs``);
        with V(final obs) bootstraps of ``previous`` if it was a step."""
        with self.clock:
            is_step = not isinstance(previous, dict)
            obs = previous.obs if is_step else previous
            out = self.policy.act(obs, mode="sample").cpu()
            boot = bootstrap_values(self.policy, previous) if is_step else None
        return Decision(out.actions.numpy(), self.version, output=out, bootstrap=boot)

    @torch.no_grad()
    def explore(self, previous, uniform: bool) -> Decision:
        """Off-policy: a tanh-Gaussian sample, or uniform actions before learning starts."""
        with self.clock:
            obs = previous if isinstance(previous, dict) else previous.obs
            if uniform:
                unit = torch.rand(obs["state"].shape[0], self.policy.spec.action.dim) * 2.0 - 1.0
            else:
                unit, _ = self.policy.rsample(obs)
            env_actions = self.policy.to_env_units(unit).cpu().numpy()[:, None, :]
        return Decision(env_actions, self.version, unit_actions=unit.cpu().numpy())

    def finish(self, result) -> torch.Tensor:
        with self.clock:
            boot = bootstrap_values(self.policy, result)
        return boot


def build_batch(envs_per_stage: int, cameras: list[str], decisions: int, *stages) -> tuple[Any, dict]:
    """An iteration's batch from its stages' results: ``stages`` is, per stage, its reset
    observation, ``decisions`` decisions, ``decisions`` step results and the final bootstrap.
    Returns (batch, what the driver reports)."""
    per_stage = 2 * decisions + 2
    batches, versions = [], []
    for k in range(len(stages) // per_stage):
        reset_obs, *rest = stages[k * per_stage : (k + 1) * per_stage]
        acts, steps, final = rest[:decisions], rest[decisions : 2 * decisions], rest[-1]
        trajectory = TrajectoryBuilder(envs_per_stage, cameras)
        obs = reset_obs
        for t, (decision, result) in enumerate(zip(acts, steps)):
            boot = acts[t + 1].bootstrap if t + 1 < decisions else final
            trajectory.add(obs, decision.output, result, boot)
            obs = result.obs
            versions.append(decision.version)
        batches.append(trajectory.build(obs))
    batch = concat_batches(batches)
    summary = {"env_steps": batch.env_steps, "finished": batch.finished, "min_version": min(versions),
               "trajectory_bytes": payload_bytes(batch)}  # fmt: skip
    return batch, summary


class ActorWorker(Worker):
    """Gradient updates of an on-policy algorithm (PPO, GRPO) on the batches the loop hands over;
    publishes versioned weights."""

    def __init__(
        self,
        spec: dict,
        policy_config: dict,
        algorithm: str,
        algo_config: dict,
        seed: int,
        cpus: float = 1.0,
        cores=None,
    ) -> None:
        settle_threads(cpus, cores)
        self.device = worker_device()
        self.algorithm = build_algorithm(spec, policy_config, algorithm, algo_config, seed, self.device)
        self.version = 0
        self.clock = Stopwatch()

    def placed_state(self):
        return [self.algorithm.policy], [self.algorithm.optimizer]

    def weights(self) -> tuple[dict, int]:
        return to_cpu(self.algorithm.policy.state_dict()), self.version

    def ingest(self, envs_per_stage: int, cameras: list[str], decisions: int, *stages) -> dict:
        """Build this iteration's batch here (:func:`build_batch`) from the stages' results as Ray
        hands them over, worker to worker: they never pass through the driver. Returns what the
        driver reports; the batch waits here for :meth:`update_ingested`.

        (Measured against building it in a Ray task beside the actor, which could overlap the
        update: on a small node that task's worker is started afresh each time, 2.7x slower.)"""
        with self.clock:
            batch, summary = build_batch(envs_per_stage, cameras, decisions, *stages)
        self._ingested = (batch, summary["min_version"])
        return summary

    def update_ingested(self) -> tuple[tuple[dict, int], dict]:
        """:meth:`update` on the ingested batch as two Ray returns, ((metrics, version), weights):
        the weights then go to the rollout worker by reference, and the driver fetches the first."""
        (batch, behaviour_version), self._ingested = self._ingested, None
        metrics, weights, version = self.update(batch, behaviour_version)
        return (metrics, version), weights

    def update(self, batch, behaviour_version: int) -> tuple[dict, dict, int]:
        cpu_before = self.clock.cpu_s
        with self.clock:
            self.algorithm.policy.update_normalizers(batch.flat_obs())
            metrics = self.algorithm.update(batch)
            metrics["policy_lag"] = float(self.version - behaviour_version)
            self.version += 1
        metrics["update_cpu_s"] = self.clock.cpu_s - cpu_before  # the dynamic schedule's actor demand
        return metrics, to_cpu(self.algorithm.policy.state_dict()), self.version

    def state(self) -> dict:
        return to_cpu(
            {
                "policy": self.algorithm.policy.state_dict(),
                "algorithm": self.algorithm.state_dict(),
                "version": self.version,
            }
        )

    def load_state(self, state: dict) -> None:
        self.algorithm.policy.load_state_dict(state["policy"])
        self.algorithm.load_state_dict(state["algorithm"])
        self.version = state["version"]
