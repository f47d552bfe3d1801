"""ManiSkill3 tasks behind the env contract: ``rlinf/ManiSkill-v0`` with ``task=PickCube-v1`` (any
ManiSkill id whose assets ship in its wheel: PickCube, PushCube, StackCube, PegInsertionSide, ...).

* **One env, on the CPU.** SAPIEN's CPU physics (``physx_cpu``) holds one env per process, so the
  vector env spreads them over subprocess workers, started from ManiSkill's own venv
  (``bash scripts/sim_venv.sh maniskill``; ``env.python=.venv-maniskill/bin/python``).
* **Observation.** ``obs_mode=state``: ManiSkill's flat state vector (field ``obs``).
  ``obs_mode=rgb``: each sensor camera's RGB at ``image_size`` as a camera, and the proprioception
  and task extras (``agent.qpos``, ``extra.tcp_pose``, ...) flattened in sorted order as named
  state fields. The instruction is the task id in words ("pick cube").
* **Action.** The controller's Box (``control_mode``, default the task's), kind ``box``.
* **Success / ends.** ``info["success"]``; ManiSkill's own termination; truncation at
  ``max_episode_steps`` (default: the task's registered limit).

SAPIEN builds every scene through Vulkan, so a CPU machine needs Mesa's lavapipe >= 24.3 (Debian 12:
``mesa-vulkan-drivers`` from bookworm-backports, which ``scripts/sim_venv.sh maniskill`` installs).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import gymnasium as gym
import numpy as np

from protos import ActionSpace, CameraSpec, EnvSpec, StateField
from protos.env_spec import BOX
from sim_envs.adapters.gymnasium import AdapterError, contract_observation_space

ENV_ID = "rlinf/ManiSkill-v0"
SETUP_HINT = "bash scripts/sim_venv.sh maniskill, then env.python=.venv-maniskill/bin/python"
VULKAN_HINT = (
    "ManiSkill (SAPIEN) needs a Vulkan driver: on a CPU machine Mesa's lavapipe >= 24.3 (Debian 12: "
    "mesa-vulkan-drivers from bookworm-backports; scripts/sim_venv.sh maniskill installs it), on a GPU "
    "NVIDIA's driver"
)


def instruction_of(task: str) -> str:
    """'PickCube-v1' -> 'pick cube'."""
    words = re.findall(r"[A-Z][a-z]+|[A-Z]+(?![a-z])|[a-z]+|\d+", task.rsplit("-v", 1)[0])
    return " ".join(w.lower() for w in words)


def _numpy(value: Any) -> np.ndarray:
    value = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
    return value[0] if value.ndim and value.shape[0] == 1 else value  # one env: drop the batch axis


def _leaves(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for key in sorted(tree):
        value = tree[key]
        out += _leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else [(prefix + key, value)]
    return out


class ManiSkillEnv(gym.Env):
    """One ManiSkill3 task env (CPU physics) seen through :class:`EnvSpec`."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        task: str = "PickCube-v1",
        obs_mode: str = "state",
        image_size: int = 128,
        control_mode: str = "",
        max_episode_steps: int = 0,
        control_hz: float = 0.0,  # 0: the task's control frequency
        render_mode: str | None = None,
        render_size: int = 160,
    ) -> None:
        if obs_mode not in ("state", "rgb"):
            raise AdapterError(f"{ENV_ID}: obs_mode must be 'state' or 'rgb', got {obs_mode!r}")
        try:
            import mani_skill.envs  # noqa: F401  registers the task ids
            from mani_skill import logger

            logger.setLevel(logging.ERROR)  # not "no CUDA device, falling back to cpu" for every env
        except ImportError:
            raise AdapterError(f"{ENV_ID} needs ManiSkill3 (the maniskill extra): {SETUP_HINT}") from None
        if task not in gym.registry:
            raise AdapterError(f"{ENV_ID}: unknown ManiSkill task {task!r} (e.g. PickCube-v1, PushCube-v1)")
        options: dict[str, Any] = {"obs_mode": obs_mode, "num_envs": 1, "sim_backend": "physx_cpu"}
        if obs_mode == "rgb":
            options["sensor_configs"] = {"width": image_size, "height": image_size}
        if control_mode:
            options["control_mode"] = control_mode
        if render_mode is not None:
            options.update(
                render_mode=render_mode,
                human_render_camera_configs={"width": render_size, "height": render_size},
            )
        try:
            self.env = gym.make(task, **options)
        except RuntimeError as exc:
            if "vk::" in str(exc) or "Vulkan" in str(exc):
                raise AdapterError(f"{ENV_ID}: {VULKAN_HINT} ({exc})") from None
            raise
        horizon = max_episode_steps or gym.registry[task].max_episode_steps or 0
        if horizon <= 0:
            raise AdapterError(f"{ENV_ID}: {task} has no registered time limit: set max_episode_steps")
        self.task, self.obs_mode, self.max_episode_steps = task, obs_mode, int(horizon)
        first, _ = self.env.reset(seed=0)
        self.cameras, self.state_keys = self._layout(first)
        space = self.env.action_space
        low, high = np.asarray(space.low, np.float64).ravel(), np.asarray(space.high, np.float64).ravel()
        hz = control_hz or float(self.env.unwrapped.control_freq)
        self.env_spec = EnvSpec(
            name=ENV_ID,
            cameras=tuple(CameraSpec(c, image_size, image_size, hz) for c in self.cameras),
            state_fields=tuple(StateField(k, n) for k, n in self.state_keys),
            action=ActionSpace(BOX, tuple(f"a{i}" for i in range(low.size)), tuple(low), tuple(high)),
            control_hz=hz,
            instruction=instruction_of(task),
            max_episode_steps=self.max_episode_steps,
            metadata={
                "simulator": "maniskill",
                "task": task,
                "control_mode": str(self.env.unwrapped.control_mode),
            },
        )
        self.observation_space = contract_observation_space(self.env_spec)
        self.action_space = gym.spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)
        self.render_mode = render_mode
        self._steps = 0

    def _layout(self, raw: Any) -> tuple[list[str], list[tuple[str, int]]]:
        if self.obs_mode == "state":
            return [], [("obs", int(_numpy(raw).size))]
        cameras = sorted(raw["sensor_data"])
        leaves = _leaves({"agent": raw["agent"], "extra": raw.get("extra", {})})
        return cameras, [(k, max(1, int(_numpy(v).size))) for k, v in leaves]

    def _convert(self, raw: Any) -> dict[str, Any]:
        if self.obs_mode == "state":
            return {"images": {}, "state": _numpy(raw).astype(np.float32).ravel(),
                    "instruction": self.env_spec.instruction}  # fmt: skip
        leaves = _leaves({"agent": raw["agent"], "extra": raw.get("extra", {})})
        return {
            "images": {
                c: _numpy(raw["sensor_data"][c]["rgb"])[..., :3].astype(np.uint8) for c in self.cameras
            },
            "state": np.concatenate([_numpy(v).astype(np.float32).ravel() for _, v in leaves]),
            "instruction": self.env_spec.instruction,
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        raw, _ = self.env.reset(seed=seed, options=options)
        self._steps = 0
        return self._convert(raw), {"success": False}

    def step(self, action):
        action = np.clip(np.asarray(action, np.float32), self.action_space.low, self.action_space.high)
        raw, reward, terminated, _, info = self.env.step(action)
        self._steps += 1
        success = bool(_numpy(info.get("success", False)))
        terminated = bool(_numpy(terminated))
        truncated = not terminated and self._steps >= self.max_episode_steps
        return self._convert(raw), float(_numpy(reward)), terminated, truncated, {"success": success}

    def render(self):
        return _numpy(self.env.render()) if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        self.env.close()
