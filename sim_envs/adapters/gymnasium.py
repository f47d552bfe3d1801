"""Any gymnasium env behind the env contract, so ``train``, the env pool and the VLA path take it.

Rules, from the env's spaces:

* **Observation.** A flat ``Box`` is the state (one field, ``obs``). A ``Dict``: every ``uint8`` Box
  of shape ``(H, W, 3)`` is a camera named by its key; every other numeric Box is a state field
  named by its key (flattened, in sorted key order); a ``Text`` key named ``instruction`` is the
  instruction; anything else is refused with its key. A lone ``uint8 (H, W, 3)`` Box is one camera,
  ``image``.
* **Action.** A ``Box`` with finite bounds, flattened; its kind is ``box`` (no robot runs it).
* **Success.** ``info[success_key]`` (default ``"success"``), False where the env gives none.
* **Horizon.** The registered ``max_episode_steps`` (gymnasium's TimeLimit), or ``max_episode_steps``.

``module`` names a module to import first (the one that registers the id); the subprocess vector
workers import it too, since they build their envs from the same config.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import gymnasium as gym
import numpy as np

from protos import ActionSpace, CameraSpec, EnvSpec, StateField
from protos.env_spec import BOX, INSTRUCTION_CHARSET
from protos.user_error import UserError

log = logging.getLogger(__name__)


class AdapterError(UserError, ValueError):
    """An env whose spaces do not map onto the contract, said in one line."""


def import_env_module(module: str) -> None:
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise AdapterError(f"env module {module!r} cannot be imported: {exc}") from None


def _is_image(space: gym.Space) -> bool:
    return (
        isinstance(space, gym.spaces.Box)
        and space.dtype == np.uint8
        and len(space.shape) == 3
        and space.shape[2] == 3
    )


def observation_layout(space: gym.Space) -> tuple[list[str], list[tuple[str, int]], bool]:
    """(camera keys, state (key, size) pairs, has instruction) of an observation space."""
    if _is_image(space):
        return ["image"], [], False
    if isinstance(space, gym.spaces.Box):
        return [], [("obs", int(np.prod(space.shape)))], False
    if not isinstance(space, gym.spaces.Dict):
        raise AdapterError(f"observation space {type(space).__name__} is neither a Box nor a Dict of Boxes")
    cameras, state, instruction = [], [], False
    for key in sorted(space.spaces):
        sub = space.spaces[key]
        if _is_image(sub):
            cameras.append(key)
        elif isinstance(sub, gym.spaces.Box):
            state.append((key, int(np.prod(sub.shape))))
        elif isinstance(sub, gym.spaces.Text) and key == "instruction":
            instruction = True
        else:
            raise AdapterError(
                f"observation key {key!r} is a {type(sub).__name__}: only Box and an 'instruction' Text map"
            )
    return cameras, state, instruction


def contract_observation_space(spec: EnvSpec) -> gym.spaces.Dict:
    """The gymnasium space of the shared observation layout that ``spec`` describes."""
    return gym.spaces.Dict(
        {
            "images": gym.spaces.Dict(
                {c.name: gym.spaces.Box(0, 255, c.shape, dtype=np.uint8) for c in spec.cameras}
            ),
            "state": gym.spaces.Box(-np.inf, np.inf, (spec.state_dim,), np.float32),
            "instruction": gym.spaces.Text(max_length=256, charset=INSTRUCTION_CHARSET),
        }
    )


class GymnasiumAdapter(gym.Env):
    """One gymnasium env seen through :class:`EnvSpec` and the shared observation layout."""

    def __init__(
        self,
        env_id: str,
        module: str = "",
        success_key: str = "success",
        max_episode_steps: int = 0,
        instruction: str = "",
        control_hz: float = 10.0,
        render_size: int = 0,  # the Franka sims' display size; an outside env renders at its own
        **env_kwargs: Any,
    ) -> None:
        import_env_module(module)
        try:
            self.env = gym.make(env_id, max_episode_steps=max_episode_steps or None, **env_kwargs)
        except gym.error.Error as exc:
            raise AdapterError(f"gymnasium cannot make {env_id!r}: {exc}") from None
        except TypeError as exc:  # e.g. a Franka preset's env.kwargs handed to another env
            raise AdapterError(
                f"gymnasium cannot make {env_id!r} with env.kwargs {sorted(env_kwargs)}: {exc} (start from "
                "a config whose env.kwargs suit this env, e.g. --config ppo_gym)"
            ) from None
        self.success_key, self.instruction = success_key, instruction or env_id
        self.cameras, self.state_keys, self.has_instruction = observation_layout(self.env.observation_space)
        space = self.env.observation_space
        self._flat_state = isinstance(space, gym.spaces.Box) and not self.cameras
        # A 1-D Box: its observations are state rows as they come, which the vector env batches itself.
        self.state_rows = self._flat_state and len(space.shape) == 1
        action = self.env.action_space
        if not isinstance(action, gym.spaces.Box):
            raise AdapterError(f"{env_id}: the action space is {type(action).__name__}; only a Box maps")
        low, high = action.low.astype(np.float64).ravel(), action.high.astype(np.float64).ravel()
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise AdapterError(f"{env_id}: the action space has unbounded dimensions; a policy needs bounds")
        horizon = max_episode_steps or (self.env.spec.max_episode_steps if self.env.spec else None) or 0
        if horizon <= 0:
            raise AdapterError(f"{env_id} has no registered time limit: set max_episode_steps")
        images = {k: self.env.observation_space[k] for k in self.cameras} if self.cameras != ["image"] else {}
        self.env_spec = EnvSpec(
            name=env_id,
            cameras=tuple(
                CameraSpec(
                    k,
                    *(images[k].shape[:2] if k in images else self.env.observation_space.shape[:2]),
                    control_hz,
                )
                for k in self.cameras
            ),
            state_fields=tuple(StateField(k, n) for k, n in self.state_keys),
            action=ActionSpace(
                BOX, tuple(f"a{i}" for i in range(low.size)), tuple(map(float, low)), tuple(map(float, high))
            ),
            control_hz=control_hz,
            instruction=self.instruction,
            max_episode_steps=int(horizon),
            metadata={"simulator": "gymnasium", "gym_id": env_id},
        )
        self._action_shape = action.shape
        self.observation_space = contract_observation_space(self.env_spec)
        self.action_space = gym.spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)
        self.max_episode_steps = self.env_spec.max_episode_steps
        self._render_broken = False

    def _convert(self, raw: Any) -> dict[str, Any]:
        """The shared layout, in arrays of its own (``np.array`` copies): an env may hand out one array
        every step and overwrite it, and an episode's final observation must outlive the reset."""
        if self._flat_state:  # the common case, first: a fast env pays for every line here
            state = np.array(raw, np.float32)
            return {"images": {}, "state": state if state.ndim == 1 else state.ravel(),
                    "instruction": self.instruction}  # fmt: skip
        if not isinstance(raw, dict):
            return {"images": {"image": np.array(raw, np.uint8)}, "state": np.zeros(0, np.float32),
                    "instruction": self.instruction}  # fmt: skip
        state = [np.asarray(raw[k], np.float32).ravel() for k, _ in self.state_keys]  # concatenate copies
        return {
            "images": {k: np.array(raw[k], np.uint8) for k in self.cameras},
            "state": np.concatenate(state) if state else np.zeros(0, np.float32),
            "instruction": str(raw["instruction"]) if self.has_instruction else self.instruction,
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        raw, info = self.env.reset(seed=seed, options=options)
        return self._convert(raw), {**info, "success": bool(info.get(self.success_key, False))}

    def _env_action(self, action) -> np.ndarray:
        action = np.asarray(action, np.float32)
        return action if action.shape == self._action_shape else action.reshape(self._action_shape)

    def step(self, action):
        raw, reward, terminated, truncated, info = self.env.step(self._env_action(action))
        info = {**info, "success": bool(info.get(self.success_key, False))}
        return self._convert(raw), float(reward), bool(terminated), bool(truncated), info

    def step_state(self, action) -> tuple[np.ndarray, float, bool, bool, bool]:
        """``step`` of an env with ``state_rows``, lean for the vector env (which batches the rows
        itself): (the env's own observation row, reward, terminated, truncated, success). A cheap env
        (Pendulum: about 11 us a step) loses a tenth of its rate to building and then unpacking one
        observation dict per env per step."""
        raw, reward, terminated, truncated, info = self.env.step(self._env_action(action))
        return raw, float(reward), bool(terminated), bool(truncated), bool(info.get(self.success_key, False))

    def observation(self, raw: Any) -> dict[str, Any]:
        """The shared observation layout of one of the env's own observations."""
        return self._convert(raw)

    def render(self):
        """The env's frame, or None where it cannot render here (e.g. pygame missing): no video then."""
        if self._render_broken:
            return None
        try:
            return self.env.render()
        except gym.error.DependencyNotInstalled as exc:
            log.warning("%s cannot render (%s): no video", self.env_spec.name, exc)
            self._render_broken = True
            return None

    def close(self) -> None:
        self.env.close()
