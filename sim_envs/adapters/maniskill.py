"""ManiSkill3 tasks behind the env contract: ``rlinf/ManiSkill-v0`` with ``task=PickCube-v1`` (any
ManiSkill id whose assets ship in its wheel: PickCube, PushCube, StackCube, PegInsertionSide, ...;
and ours, ``PutOnPlateInScene25Primitives-v1``, whose instruction each episode draws).

* **One env, on the CPU.** SAPIEN's CPU physics (``physx_cpu``) holds one env per process, so the
  vector env spreads them over subprocess workers, started from ManiSkill's own venv
  (``bash scripts/sim_venv.sh maniskill``; ``env.python=.venv-maniskill/bin/python``).
* **Observation.** ``obs_mode=state``: ManiSkill's flat state vector (field ``obs``).
  ``obs_mode=rgb``: each sensor camera's RGB at ``image_size`` as a camera, and the proprioception
  and task extras (``agent.qpos``, ``extra.tcp_pose``, ...) flattened in sorted order as named
  state fields. The instruction is the task id in words ("pick cube"), or each env's own where the
  task draws one every episode (``episode_instructions``).
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
from protos.batch import select_row
from protos.env_spec import BOX
from sim_envs.adapters.batched import to_numpy
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


def episode_instructions(env: Any, default: str) -> str | list[str]:
    """Each env's instruction where the task draws its own every episode (``instructions`` on the
    unwrapped env, as ``PutOnPlateInScene25Primitives-v1`` does), else the task's ``default``."""
    found = getattr(env.unwrapped, "instructions", None)
    return list(found) if found else default


def _numpy(value: Any) -> np.ndarray:
    value = to_numpy(value)
    return value[0] if value.ndim and value.shape[0] == 1 else value  # one env: drop the batch axis


def _leaves(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for key in sorted(tree):
        value = tree[key]
        out += _leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else [(prefix + key, value)]
    return out


def make_maniskill(
    task: str,
    obs_mode: str,
    image_size: int,
    control_mode: str,
    num_envs: int = 1,
    sim_backend: str = "physx_cpu",
    **options: Any,
):
    """``gym.make`` of a ManiSkill task with our options, one-line errors where ManiSkill, the task
    or Vulkan is missing."""
    if obs_mode not in ("state", "rgb"):
        raise AdapterError(f"{ENV_ID}: obs_mode must be 'state' or 'rgb', got {obs_mode!r}")
    try:
        import mani_skill.envs  # noqa: F401  registers the task ids
        from mani_skill import logger

        import sim_envs.adapters.maniskill_put_on_plate  # noqa: F401  registers ours

        logger.setLevel(logging.ERROR)  # not "no CUDA device, falling back to cpu" for every env
    except ImportError:
        raise AdapterError(f"{ENV_ID} needs ManiSkill3 (the maniskill extra): {SETUP_HINT}") from None
    if task not in gym.registry:
        raise AdapterError(f"{ENV_ID}: unknown ManiSkill task {task!r} (e.g. PickCube-v1, PushCube-v1)")
    options.update(obs_mode=obs_mode, num_envs=num_envs, sim_backend=sim_backend)
    if obs_mode == "rgb":
        options["sensor_configs"] = {"width": image_size, "height": image_size}
    if control_mode:
        options["control_mode"] = control_mode
    try:
        return gym.make(task, **options)
    except RuntimeError as exc:
        if "vk::" in str(exc) or "Vulkan" in str(exc):
            raise AdapterError(f"{ENV_ID}: {VULKAN_HINT} ({exc})") from None
        raise


def task_horizon(task: str, max_episode_steps: int) -> int:
    """``max_episode_steps``, or the task's registered time limit."""
    horizon = max_episode_steps or gym.registry[task].max_episode_steps or 0
    if horizon <= 0:
        raise AdapterError(f"{ENV_ID}: {task} has no registered time limit: set max_episode_steps")
    return int(horizon)


class ObservationLayout:
    """How a ManiSkill observation maps onto the shared layout, batch axis kept: ``state`` mode's
    flat vector as field ``obs``; ``rgb`` mode's sensor cameras and the sorted proprioception and
    task leaves (``agent.qpos``, ``extra.tcp_pose``, ...) as named state fields."""

    def __init__(self, obs_mode: str, first: Any) -> None:
        self.obs_mode = obs_mode
        if obs_mode == "state":
            self.cameras: list[str] = []
            self.state_keys = [("obs", int(np.prod(first.shape[1:])))]
        else:
            self.cameras = sorted(first["sensor_data"])
            self.state_keys = [(k, max(1, int(np.prod(v.shape[1:])))) for k, v in self._state_leaves(first)]

    @staticmethod
    def _state_leaves(raw: Any) -> list[tuple[str, Any]]:
        return _leaves({"agent": raw["agent"], "extra": raw.get("extra", {})})

    def convert(self, raw: Any, instruction: str | list[str]) -> dict[str, Any]:
        """The batch's observation: images ``[N, H, W, 3]`` uint8, state ``[N, D]`` float32;
        ``instruction``: one for every env, or each env's own (``episode_instructions``)."""
        if self.obs_mode == "state":
            state = to_numpy(raw).astype(np.float32)
            state = state.reshape(len(state), -1)
            images = {}
        else:
            leaves = [to_numpy(v).astype(np.float32) for _, v in self._state_leaves(raw)]
            state = np.concatenate([v.reshape(len(v), -1) for v in leaves], axis=1)
            images = {
                c: to_numpy(raw["sensor_data"][c]["rgb"])[..., :3].astype(np.uint8) for c in self.cameras
            }
        instructions = [instruction] * len(state) if isinstance(instruction, str) else list(instruction)
        return {"images": images, "state": state, "instruction": instructions}


def maniskill_spec(
    env: Any,
    task: str,
    layout: ObservationLayout,
    image_size: int,
    horizon: int,
    control_hz: float,
    name: str = ENV_ID,
) -> EnvSpec:
    """The :class:`EnvSpec` of one env of a (batched) ManiSkill env."""
    base = env.unwrapped
    space = getattr(base, "single_action_space", None) or env.action_space
    low, high = np.asarray(space.low, np.float64).ravel(), np.asarray(space.high, np.float64).ravel()
    hz = control_hz or float(base.control_freq)
    drawn = episode_instructions(env, instruction_of(task))
    instruction = drawn if isinstance(drawn, str) else drawn[0]  # a task that draws one: an example
    return EnvSpec(
        name=name,
        cameras=tuple(CameraSpec(c, image_size, image_size, hz) for c in layout.cameras),
        state_fields=tuple(StateField(k, n) for k, n in layout.state_keys),
        action=ActionSpace(BOX, tuple(f"a{i}" for i in range(low.size)), tuple(low), tuple(high)),
        control_hz=hz,
        instruction=instruction,
        max_episode_steps=horizon,
        metadata={"simulator": "maniskill", "task": task, "control_mode": str(base.control_mode)},
    )


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
        render: dict[str, Any] = {}
        if render_mode is not None:
            render = {"render_mode": render_mode,
                      "human_render_camera_configs": {"width": render_size, "height": render_size}}  # fmt: skip
        self.env = make_maniskill(task, obs_mode, image_size, control_mode, **render)
        self.task, self.obs_mode = task, obs_mode
        self.max_episode_steps = task_horizon(task, max_episode_steps)
        first, _ = self.env.reset(seed=0)
        self.layout = ObservationLayout(obs_mode, first)
        self.env_spec = maniskill_spec(
            self.env, task, self.layout, image_size, self.max_episode_steps, control_hz
        )
        self.observation_space = contract_observation_space(self.env_spec)
        action = self.env_spec.action
        self.action_space = gym.spaces.Box(
            np.asarray(action.low, np.float32), np.asarray(action.high, np.float32), dtype=np.float32
        )
        self.render_mode = render_mode
        self._steps = 0

    def _convert(self, raw: Any) -> dict[str, Any]:
        instruction = episode_instructions(self.env, self.env_spec.instruction)
        return select_row(self.layout.convert(raw, instruction), 0)

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
