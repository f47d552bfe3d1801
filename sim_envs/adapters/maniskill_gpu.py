"""ManiSkill3 with its GPU-batched physics: ``rlinf/ManiSkillGPU-v0`` (``task=PickCube-v1``, ...).

SAPIEN's GPU physics (``physx_cuda``) steps every env of a scene batch in one call, so
:class:`ManiSkillGPUVectorEnv` maps one ManiSkill env of ``num_envs`` onto our vector env in the
trainer's process: no subprocess per env, observations leave the GPU once per step for the whole
batch. The observation layout, action space and instruction are those of ``rlinf/ManiSkill-v0``
(:mod:`sim_envs.adapters.maniskill`), so a policy trained on one runs on the other.

* **Ends.** An env whose episode ends (ManiSkill's termination, or ``max_episode_steps``) keeps its
  last observation in ``final_obs`` and is reset alone (ManiSkill's partial reset, ``env_idx``); in a
  chunk it plays the rest into its new episode, masked invalid (:mod:`sim_envs.adapters.batched`).
* **Seeds.** A seeded reset seeds the batch (ManiSkill draws every env's start from one torch
  generator), so per-env seeds (GRPO's groups) are refused.
* **Device.** ``sim_backend``: ``physx_cuda`` (default; needs an NVIDIA GPU and its Vulkan driver) or
  ``physx_cpu``, where SAPIEN holds one env per process (``num_envs=1``; what the CPU tests use).
  ``env.python`` does not apply: ManiSkill must import in the trainer's own venv (``.[maniskill]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from protos.batch import select_row
from sim_envs.adapters.batched import BatchedVectorEnv, BatchStep, one_batch_seed, to_numpy
from sim_envs.adapters.gymnasium import AdapterError
from sim_envs.adapters.maniskill import (
    ObservationLayout,
    episode_instructions,
    make_maniskill,
    maniskill_spec,
    task_horizon,
)

ENV_ID = "rlinf/ManiSkillGPU-v0"
PHYSX_GPU_URL = "https://github.com/sapien-sim/physx-precompiled/releases/download/{version}/linux-so.zip"


def gpu_physics_problems() -> list[str]:
    """What SAPIEN's GPU physics lacks here (empty: ready): a CUDA GPU, and SAPIEN's PhysX GPU
    library, which SAPIEN fetches from GitHub on first use (an offline machine must be given it)."""
    import sapien.physx as physx
    import torch  # ManiSkill's own dependency

    problems = []
    if not torch.cuda.is_available():
        problems.append("a CUDA GPU (torch sees none)")
    library = Path.home() / ".sapien" / "physx" / physx.version() / "libPhysXGpu_64.so"
    if physx.is_gpu_enabled() or library.exists():
        return problems
    fetch = (
        f"unzip {PHYSX_GPU_URL.format(version=physx.version())} into {library.parent} "
        "(SAPIEN downloads it there on first use)"
    )
    if problems:  # no GPU: say what else is missing without trying to fetch anything
        return [*problems, f"SAPIEN's PhysX GPU library: {fetch}"]
    try:
        physx.enable_gpu()
    except Exception as exc:  # requests' network errors, a broken zip, a library that will not load
        problems.append(f"SAPIEN's PhysX GPU library ({type(exc).__name__}: {str(exc)[:200]}): {fetch}")
    return problems


class ManiSkillGPUVectorEnv(BatchedVectorEnv):
    """A batch of one ManiSkill3 task's envs on SAPIEN's GPU physics, as one of our vector envs."""

    def __init__(
        self,
        num_envs: int,
        task: str = "PickCube-v1",
        obs_mode: str = "state",
        image_size: int = 128,
        control_mode: str = "",
        max_episode_steps: int = 0,
        control_hz: float = 0.0,
        sim_backend: str = "physx_cuda",
    ) -> None:
        if sim_backend == "physx_cpu" and num_envs != 1:
            raise AdapterError(
                f"{ENV_ID}: SAPIEN's CPU physics holds one env per process (num_envs=1 with "
                "sim_backend=physx_cpu); for CPU envs in parallel use rlinf/ManiSkill-v0's workers"
            )
        if sim_backend == "physx_cuda":
            try:
                problems = gpu_physics_problems()
            except ImportError:
                problems = []  # make_maniskill names the extra to install
            if problems:
                raise AdapterError(f"{ENV_ID}: SAPIEN's GPU physics needs " + "; and ".join(problems))
        super().__init__(num_envs)
        self.env = make_maniskill(task, obs_mode, image_size, control_mode, num_envs, sim_backend)
        base = self.env.unwrapped
        if base.num_envs != num_envs:
            raise AdapterError(f"{ENV_ID}: asked for {num_envs} envs, {task} made {base.num_envs}")
        self.horizon = task_horizon(task, max_episode_steps)
        self._last, _ = self.env.reset(seed=0)
        self.layout = ObservationLayout(obs_mode, self._last)
        self.spec = maniskill_spec(
            self.env, task, self.layout, image_size, self.horizon, control_hz, name=ENV_ID
        )

    def _observation(self) -> dict[str, Any]:
        return self.layout.convert(self._last, episode_instructions(self.env, self.spec.instruction))

    def reset(self, seed: int | None = None, seeds: list[int | None] | None = None) -> tuple[dict, dict]:
        if seeds is not None:
            seed = one_batch_seed(ENV_ID, seeds)
        self._last, _ = self.env.reset(seed=seed)
        self._clear_episodes()
        return self._observation(), {}

    def _advance(self, actions: np.ndarray) -> BatchStep:
        base = self.env.unwrapped
        self._last, reward, terminated, _, info = self.env.step(actions)  # ManiSkill moves it to its device
        terminated = to_numpy(terminated).astype(bool)
        # Our time limit, not the wrapper's: max_episode_steps may differ from the registered one.
        truncated = to_numpy(base.elapsed_steps) >= self.horizon
        success = (
            to_numpy(info["success"]).astype(bool) if "success" in info else np.zeros(self.num_envs, bool)
        )
        final_obs: list[dict[str, Any] | None] = [None] * self.num_envs
        ended = np.flatnonzero(terminated | truncated)
        if ended.size:
            last = self._observation()
            for i in ended:
                final_obs[i] = select_row(last, int(i))
            index = base.elapsed_steps.new_tensor(ended).long()  # on the env's device, no torch import
            self._last, _ = self.env.reset(options={"env_idx": index})
        return BatchStep(
            reward=to_numpy(reward).astype(np.float32).reshape(self.num_envs),
            terminated=terminated,
            truncated=truncated,
            success=success,
            final_obs=final_obs,
        )

    def close(self) -> None:
        self.env.close()
