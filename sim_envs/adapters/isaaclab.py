"""IsaacLab tasks behind the batched env contract: ``rlinf/IsaacLab-v0`` with ``task=Isaac-...``.

IsaacLab's envs (``ManagerBasedRLEnv`` / ``DirectRLEnv``) are already vectorised on the GPU: one
``step(actions[N, A])`` moves every env and returns torch tensors, resetting finished envs inside
the step. :class:`IsaacLabVectorEnv` maps that onto our vector env directly, without a process per
env:

* **Observation.** The ``obs_group`` (default ``policy``) group: a tensor ``[N, D]`` is the state;
  a dict of terms gives ``[N, H, W, 3|4]`` terms as cameras (float in [0, 1] scaled to uint8) and
  the rest, flattened in sorted key order, as named state fields.
* **Action.** IsaacLab's action spaces are unbounded; the policy acts in ``[-action_bound,
  action_bound]`` (the task config's action scale maps that onto the robot). Kind ``box``.
* **Success.** ``success_term``: the termination term that means success (e.g. a goal-reached
  term), read from the termination manager after each step; none: False.
* **Chunks.** The physics is batched, so an env whose episode ends mid-chunk cannot wait: IsaacLab
  has already reset it, and the rest of the chunk plays into its new episode, masked invalid.
* **Ends.** IsaacLab returns the next episode's first observation, never the last one, so
  ``final_obs`` is None (a truncated episode bootstraps from the new start, as RSL-RL does).
* **Seeds.** One seed seeds the whole batch; per-env seeds (GRPO's groups) are refused.

Actions go to the GPU as tensors made from the last observation (``new_tensor``), so this module
imports no torch itself. ``factory`` (``module:callable``) is the seam: by default it launches Isaac
Sim headless (``isaaclab.app.AppLauncher``) and ``gym.make``-s the task with ``parse_env_cfg``;
tests pass a CPU stand-in with the same interface.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from protos import ActionSpace, CameraSpec, EnvSpec, StateField
from protos.env_spec import BOX
from sim_envs.adapters.batched import BatchedVectorEnv, BatchStep, one_batch_seed, to_numpy
from sim_envs.adapters.gymnasium import AdapterError

ENV_ID = "rlinf/IsaacLab-v0"


def launch_isaaclab(task: str, num_envs: int, device: str, headless: bool = True):
    """Start Isaac Sim (once per process, before anything imports ``isaaclab``) and make ``task``."""
    try:
        from isaaclab.app import AppLauncher
    except ImportError:
        raise AdapterError(
            f"{ENV_ID} needs IsaacLab and Isaac Sim (the isaaclab extra, on a GPU machine with NVIDIA's "
            "drivers; see https://isaac-sim.github.io/IsaacLab): isaaclab.app cannot be imported"
        ) from None
    AppLauncher(headless=headless, device=device)
    import gymnasium as gym
    import isaaclab_tasks  # noqa: F401  registers the Isaac-* ids
    from isaaclab_tasks.utils import parse_env_cfg

    if task not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("Isaac-"))[:5]
        raise AdapterError(f"{ENV_ID}: unknown IsaacLab task {task!r}; e.g. {known}")
    return gym.make(task, cfg=parse_env_cfg(task, device=device, num_envs=num_envs))


def _factory(path: str):
    from sim_envs.registry import load_entry_point

    try:
        return load_entry_point(path)
    except (ImportError, AttributeError, ValueError) as exc:
        raise AdapterError(f"{ENV_ID}: factory {path!r} cannot be loaded ({exc})") from None


class IsaacLabVectorEnv(BatchedVectorEnv):
    """An IsaacLab task's batch of envs as one of our vector envs."""

    def __init__(
        self,
        num_envs: int,
        task: str = "Isaac-Lift-Cube-Franka-v0",
        device: str = "cuda:0",
        obs_group: str = "policy",
        success_term: str = "",
        action_bound: float = 1.0,
        instruction: str = "",
        factory: str = "",
    ) -> None:
        super().__init__(num_envs)
        make = _factory(factory) if factory else launch_isaaclab
        self.env = make(task=task, num_envs=num_envs, device=device).unwrapped
        if self.env.num_envs != num_envs:
            raise AdapterError(f"{ENV_ID}: asked for {num_envs} envs, {task} made {self.env.num_envs}")
        self.obs_group, self.success_term = obs_group, success_term
        self._last: dict[str, Any] | None = None
        first, _ = self.env.reset()
        self.spec = self._build_spec(task, first, action_bound, instruction)
        self._last = first

    # -- contract ------------------------------------------------------------------------------
    def _group(self, raw: dict[str, Any]):
        if self.obs_group not in raw:
            raise AdapterError(f"{ENV_ID}: no observation group {self.obs_group!r}; groups: {sorted(raw)}")
        return raw[self.obs_group]

    def _layout(self, group) -> tuple[list[str], list[tuple[str, int]]]:
        if not isinstance(group, dict):
            return [], [("obs", int(np.prod(group.shape[1:])))]
        cameras = [k for k in sorted(group) if len(group[k].shape) == 4 and group[k].shape[-1] in (3, 4)]
        state = [(k, int(np.prod(group[k].shape[1:]))) for k in sorted(group) if k not in cameras]
        return cameras, state

    def _build_spec(self, task: str, first: dict[str, Any], bound: float, instruction: str) -> EnvSpec:
        group = self._group(first)
        self._cameras, self._state = self._layout(group)
        space = getattr(self.env, "single_action_space", None)
        if space is None or len(space.shape) != 1:
            raise AdapterError(f"{ENV_ID}: {task} has no flat single_action_space")
        low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
        low, high = np.where(np.isfinite(low), low, -bound), np.where(np.isfinite(high), high, bound)
        hz = 1.0 / float(self.env.step_dt)
        return EnvSpec(
            name=ENV_ID,
            cameras=tuple(CameraSpec(k, *group[k].shape[1:3], hz) for k in self._cameras),
            state_fields=tuple(StateField(k, n) for k, n in self._state),
            action=ActionSpace(BOX, tuple(f"a{i}" for i in range(low.size)), tuple(low), tuple(high)),
            control_hz=hz,
            instruction=instruction or task,
            max_episode_steps=math.ceil(self.env.max_episode_length),
            metadata={"simulator": "isaaclab", "task": task},
        )

    def _convert(self, raw: dict[str, Any]) -> dict[str, Any]:
        group = self._group(raw)
        if not isinstance(group, dict):
            state = to_numpy(group).reshape(self.num_envs, -1).astype(np.float32)
            images: dict[str, np.ndarray] = {}
        else:
            state = np.concatenate(
                [to_numpy(group[k]).reshape(self.num_envs, -1) for k, _ in self._state], axis=1
            ).astype(np.float32)
            images = {}
            for k in self._cameras:
                pixels = to_numpy(group[k])[..., :3]
                images[k] = (
                    pixels if pixels.dtype == np.uint8 else np.clip(pixels * 255, 0, 255).astype(np.uint8)
                )
        return {"images": images, "state": state, "instruction": [self.spec.instruction] * self.num_envs}

    def reset(self, seed: int | None = None, seeds: list[int | None] | None = None) -> tuple[dict, dict]:
        if seeds is not None:
            seed = one_batch_seed(ENV_ID, seeds)
        self._last, _ = self.env.reset(seed=seed)
        self._clear_episodes()
        return self._convert(self._last), {}

    def _observation(self) -> dict[str, Any]:
        assert self._last is not None
        return self._convert(self._last)

    def _success_now(self) -> np.ndarray:
        if not self.success_term:
            return np.zeros(self.num_envs, bool)
        return to_numpy(self.env.termination_manager.get_term(self.success_term)).astype(bool)

    def _advance(self, actions: np.ndarray) -> BatchStep:
        assert self._last is not None
        reference = self._group(self._last)
        reference = next(iter(reference.values())) if isinstance(reference, dict) else reference
        sent = reference.new_tensor(actions)  # on the env's device, no torch import
        self._last, reward, terminated, truncated, _ = self.env.step(sent)
        return BatchStep(
            reward=to_numpy(reward).astype(np.float32),
            terminated=to_numpy(terminated),
            truncated=to_numpy(truncated),
            success=self._success_now(),
            final_obs=[None] * self.num_envs,  # IsaacLab returns the next episode's first observation
        )

    def close(self) -> None:
        self.env.close()
