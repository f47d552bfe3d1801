"""A replay buffer of transitions in fixed numpy arrays, saved and loaded as ``.npz``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from protos import EnvSpec
from protos.atomic_files import write_atomic


class ReplayBuffer:
    """Ring buffer of (obs, action in [-1, 1], reward, terminated, next_obs, weight).

    ``weight`` is the transition's training weight: its source's (``train.sim_weight`` /
    ``train.robot_weight`` in a sim + robot pool), 1 otherwise.

    Rows can be ``discard``-ed after the fact (a robot episode that was aborted): they are never
    sampled again, and their slots are reused as the ring wraps.
    """

    def __init__(self, spec: EnvSpec, capacity: int, cameras: list[str]) -> None:
        self.capacity, self.cameras = capacity, list(cameras)
        self.size, self.cursor = 0, 0
        self.data: dict[str, np.ndarray] = {
            "state": np.zeros((capacity, spec.state_dim), np.float32),
            "next_state": np.zeros((capacity, spec.state_dim), np.float32),
            "action": np.zeros((capacity, spec.action.dim), np.float32),
            "reward": np.zeros(capacity, np.float32),
            "terminated": np.zeros(capacity, np.float32),
            "weight": np.ones(capacity, np.float32),
            "usable": np.ones(capacity, bool),
        }
        self._discarded = 0
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
        rows: np.ndarray | None = None,
        weights: np.ndarray | None = None,
    ) -> np.ndarray:
        """Add a batch of transitions (batched observation layout); ``rows`` picks some of them and
        ``weights`` (one per transition of the batch) weight them in the losses (default 1).

        Returns the buffer indices written, in row order.
        """
        rows = np.arange(len(rewards)) if rows is None else np.asarray(rows)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        n = len(rows)
        idx = (self.cursor + np.arange(n)) % self.capacity
        self._discarded -= int((~self.data["usable"][idx[idx < self.size]]).sum())
        self.data["state"][idx] = obs["state"][rows]
        self.data["next_state"][idx] = next_obs["state"][rows]
        self.data["action"][idx] = actions[rows]
        self.data["reward"][idx] = rewards[rows]
        self.data["terminated"][idx] = terminated[rows]
        self.data["weight"][idx] = 1.0 if weights is None else np.asarray(weights, np.float32)[rows]
        self.data["usable"][idx] = True
        for cam in self.cameras:
            self.data[f"image.{cam}"][idx] = obs["images"][cam][rows]
            self.data[f"next_image.{cam}"][idx] = next_obs["images"][cam][rows]
        self.cursor = int((self.cursor + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        return idx

    def discard(self, idx) -> None:
        """Never sample these rows again (e.g. the transitions of an aborted robot episode)."""
        idx = np.asarray(idx, dtype=np.int64)
        self._discarded += int(self.data["usable"][idx].sum())
        self.data["usable"][idx] = False

    @property
    def usable_size(self) -> int:
        return self.size - self._discarded

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, Any]:
        if self.usable_size <= 0:
            raise ValueError("cannot sample from an empty replay buffer")
        if self._discarded:
            candidates = np.flatnonzero(self.data["usable"][: self.size])
            idx = candidates[torch.randint(0, len(candidates), (batch_size,), generator=generator).numpy()]
        else:
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
            "weight": take("weight"),
        }

    def save(self, path: Path) -> None:
        arrays = {k: v[: self.size] for k, v in self.data.items()}
        write_atomic(path, lambda tmp: np.savez(tmp, cursor=self.cursor, size=self.size, **arrays))

    def load(self, path: Path) -> None:
        with np.load(path) as saved:
            size = int(saved["size"])
            if size > self.capacity:
                raise ValueError(f"saved buffer holds {size} transitions, more than capacity {self.capacity}")
            for key, array in self.data.items():
                if key in ("usable", "weight") and key not in saved:  # saved before these existed
                    array[:size] = 1
                    continue
                if key not in saved:
                    raise ValueError(f"saved buffer lacks {key!r} (different cameras?)")
                if saved[key].shape[1:] != array.shape[1:]:
                    raise ValueError(
                        f"saved buffer {key!r} has shape {saved[key].shape[1:]}, expected {array.shape[1:]}"
                    )
                array[:size] = saved[key]
            self.size, self.cursor = size, int(saved["cursor"])
            self._discarded = int((~self.data["usable"][:size]).sum())
