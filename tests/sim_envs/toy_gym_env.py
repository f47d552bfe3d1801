"""Toy gymnasium envs registered on import, for the gymnasium adapter's tests: move a point to a target
on a plane; success is in ``info["is_success"]``. ``toy/ReachDot-v0``: a 32 px camera shows both, in a
Dict; ``toy/ReachDotState-v0``: a flat float64 Box of (position, target), no camera;
``toy/ReachDotSharedRow-v0``: the same in float32, written into one array it hands out every time."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class ReachDot(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict(
            {
                "camera": gym.spaces.Box(0, 255, (32, 32, 3), np.uint8),
                "position": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                "target": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            }
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def _obs(self) -> dict:
        image = np.zeros((32, 32, 3), np.uint8)
        for point, channel in ((self.position, 0), (self.target, 1)):
            row, col = ((point + 1.0) * 15.5).astype(int)
            image[row, col, channel] = 255
        return {
            "camera": image,
            "position": self.position.astype(np.float32),
            "target": self.target.astype(np.float32),
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.uniform(-0.8, 0.8, 2)
        self.target = self.np_random.uniform(-0.8, 0.8, 2)
        return self._obs(), {"is_success": False}

    def step(self, action):
        self.position = np.clip(self.position + 0.1 * np.asarray(action, np.float64), -1.0, 1.0)
        distance = float(np.linalg.norm(self.target - self.position))
        success = distance < 0.1
        return self._obs(), -distance, success, False, {"is_success": success}


class ReachDotState(ReachDot):
    def __init__(self) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float64)

    def _obs(self) -> np.ndarray:
        return np.concatenate([self.position, self.target])


class ReachDotSharedRow(ReachDotState):
    def __init__(self) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self._row = np.zeros(4, np.float32)  # float32 as declared: the adapter takes it without a copy

    def _obs(self) -> np.ndarray:
        self._row[:2], self._row[2:] = self.position, self.target
        return self._row


if "toy/ReachDot-v0" not in gym.registry:
    gym.register("toy/ReachDot-v0", entry_point=ReachDot, max_episode_steps=20)
    gym.register("toy/ReachDotState-v0", entry_point=ReachDotState, max_episode_steps=20)
    gym.register("toy/ReachDotSharedRow-v0", entry_point=ReachDotSharedRow, max_episode_steps=20)
