"""One imagined env as a plain gymnasium env: ``gymnasium.make("rlinf/WorldModel-v0", checkpoint=PATH)``.

The trainer runs world models batched (:class:`~policies.world_model.env.WorldModelVectorEnv`); this
is the same model, one env, one action per step, for gymnasium's tools (its env checker, wrappers,
a quick look at what the model imagines).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from policies.world_model.env import WorldModelVectorEnv
from protos.batch import select_row
from protos.env_spec import INSTRUCTION_CHARSET


class WorldModelEnv(gym.Env):
    """A saved world model stepped one action at a time; observations in the shared layout (without
    ``images`` for a state-only model)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        checkpoint: str = "",
        max_episode_steps: int = 0,
        terminate_on_success: bool | None = None,
        success_threshold: float = 0.5,
        device: str = "cpu",
        halt_multiple: float = 2.0,
        halt_penalty: float = 10.0,
        start_from: str = "first",
        reward_type: str = "dense",
    ) -> None:
        self.venv = WorldModelVectorEnv(
            checkpoint,
            1,
            max_episode_steps,
            terminate_on_success,
            success_threshold,
            device,
            halt_multiple,
            halt_penalty,
            start_from,
            reward_type,
        )
        self.env_spec = spec = self.venv.spec
        self.max_episode_steps = spec.max_episode_steps
        spaces: dict[str, gym.Space] = {
            "state": gym.spaces.Box(-np.inf, np.inf, (spec.state_dim,), np.float32),
            "instruction": gym.spaces.Text(max_length=256, charset=INSTRUCTION_CHARSET),
        }
        if spec.cameras:  # left out of a state-only model's space: gymnasium refuses an empty Dict
            spaces["images"] = gym.spaces.Dict(
                {c.name: gym.spaces.Box(0, 255, c.shape, dtype=np.uint8) for c in spec.cameras}
            )
        self.observation_space = gym.spaces.Dict(spaces)
        low, high = spec.action.low_array(), spec.action.high_array()
        self.action_space = gym.spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)

    def _gym_obs(self, obs: dict[str, Any]) -> dict[str, Any]:
        """One env's observation (``select_row`` of a batch), without ``images`` when there are none."""
        out = {"state": np.asarray(obs["state"], np.float32), "instruction": obs["instruction"]}
        if self.env_spec.cameras:
            out["images"] = obs["images"]
        return out

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is None:  # gymnasium's contract: the env's own RNG, seeded once, draws the start
            seed = int(self.np_random.integers(2**31))
        obs, _ = self.venv.reset(seeds=[seed])
        return self._gym_obs(select_row(obs, 0)), {"success": False}

    def step(self, action):
        action = np.asarray(action, np.float32).reshape(1, 1, -1)
        result = self.venv.chunk_step(action)
        final = result.final_obs[0]  # the vector env has already reset an ended episode
        obs = self._gym_obs(select_row(result.obs, 0) if final is None else final)
        info = {"success": bool(result.success[0, 0])}
        return (
            obs,
            float(result.rewards[0, 0]),
            bool(result.terminated[0, 0]),
            bool(result.truncated[0, 0]),
            info,
        )

    def close(self) -> None:
        self.venv.close()
