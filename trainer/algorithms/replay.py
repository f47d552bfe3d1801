"""A replay buffer of transitions in fixed numpy arrays, saved and loaded as ``.npz``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from protos import EnvSpec


class ReplayBuffer:
    """Ring buffer of (obs, action in [-1, 1], reward, terminated, next_obs)."""

    def __init__(self, spec: EnvSpec, capacity: int, cameras: list[str]) -> None:
        self.capacity, self.cameras = capacity, list(cameras)
        self.size, self.cursor = 0, 0
        self.data: dict[str, np.ndarray] = {
            "state": np.zeros((capacity, spec.state_dim), np.float32),
            "next_state": np.zeros((capacity, spec.state_dim), np.float32),
            "action": np.zeros((capacity, spec.action.dim), np.float32),
            "reward": np.zeros(capacity, np.float32),
            "terminated": np.zeros(capacity, np.float32),
        }
        for cam in self.cameras:
            shape = spec.camera(cam).shape
            self.data[f"image.{cam}"] = np.zeros((capacity, *shape), np.uint8)
            self.data[f"next_image.{cam}"] = np.zeros((capacity, *shape), np.uint8)

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: dict[str, Any],
        actions: np.ndarray,
        rewards: np.ndarray,
        terminated: np.ndarray,
        next_obs: dict[str, Any],
    ) -> None:
        """Add a batch of N transitions (batched observation layout)."""
        n = len(rewards)
        idx = (self.cursor + np.arange(n)) % self.capacity
        self.data["state"][idx] = obs["state"]
        self.data["next_state"][idx] = next_obs["state"]
        self.data["action"][idx] = actions
        self.data["reward"][idx] = rewards
        self.data["terminated"][idx] = terminated
        for cam in self.cameras:
            self.data[f"image.{cam}"][idx] = obs["images"][cam]
            self.data[f"next_image.{cam}"][idx] = next_obs["images"][cam]
        self.cursor = int((self.cursor + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, Any]:
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = torch.randint(0, self.size, (batch_size,), generator=generator).numpy()
        take = lambda key: torch.as_tensor(self.data[key][idx])  # noqa: E731
        return {
            "obs": {"state": take("state"), "images": {c: take(f"image.{c}") for c in self.cameras}},
            "next_obs": {
                "state": take("next_state"),
                "images": {c: take(f"next_image.{c}") for c in self.cameras},
            },
            "action": take("action"),
            "reward": take("reward"),
            "terminated": take("terminated"),
        }

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp.npz")
        arrays = {k: v[: self.size] for k, v in self.data.items()}
        np.savez(tmp, cursor=self.cursor, size=self.size, **arrays)
        tmp.replace(path)

    def load(self, path: Path) -> None:
        with np.load(path) as saved:
            size = int(saved["size"])
            if size > self.capacity:
                raise ValueError(f"saved buffer holds {size} transitions, more than capacity {self.capacity}")
            for key, array in self.data.items():
                if key not in saved:
                    raise ValueError(f"saved buffer lacks {key!r} (different cameras?)")
                if saved[key].shape[1:] != array.shape[1:]:
                    raise ValueError(
                        f"saved buffer {key!r} has shape {saved[key].shape[1:]}, expected {array.shape[1:]}"
                    )
                array[:size] = saved[key]
            self.size, self.cursor = size, int(saved["cursor"])
