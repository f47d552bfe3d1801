"""A recorded LeRobot v3 dataset as RL transitions: the demonstration half of RLPD's batches.

HIL-SERL starts real-world RL from a few teleoperated episodes on the robot itself. Frame ``t`` of
an episode becomes ``(state_t, action_t, reward_t, terminated, state_t+1)``, with the executed
action mapped into the policy's [-1, 1]. An episode's last frame has no next observation in the
dataset: it is kept only when the episode ended because the task terminated (there is nothing to
bootstrap from), and dropped otherwise. Aborted episodes are skipped: a fault is not a demonstration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from protos.env_spec import EnvSpec
from protos.lerobot_dataset import DatasetError
from protos.lerobot_reader import read_episodes, read_frames
from trainer.algorithms.demonstrations import check_layout, load_demonstrations


@dataclass
class Transitions:
    """Transitions in the replay buffer's batched layout (``{"state": [N, D], "images": {...}}``)."""

    obs: dict
    actions: np.ndarray  # float32 [N, A] in [-1, 1]
    rewards: np.ndarray  # float32 [N]
    terminated: np.ndarray  # float32 [N]
    next_obs: dict

    def __len__(self) -> int:
        return len(self.rewards)


def load_transitions(
    root: str | Path, spec: EnvSpec, cameras: list[str] | tuple[str, ...] = ()
) -> Transitions:
    """Every usable transition of the dataset at ``root``; :class:`DatasetError` if it does not fit ``spec``."""
    frames = read_frames(root)
    if "next.reward" not in frames.columns:
        raise DatasetError(f"the dataset has no 'next.reward' column; it has {sorted(frames.columns)}")
    demos = load_demonstrations(root, "action", "all", 1, cameras, frames=frames)
    check_layout(demos, spec, 1, cameras)
    episodes = frames["episode_index"].to_numpy()
    meta = read_episodes(root).set_index("episode_index")
    aborted = _episodes_with(meta, "aborted", True)
    terminal = _episodes_with(meta, "end_reason", "terminated")

    last = np.append(episodes[1:] != episodes[:-1], True)
    ends_terminal = np.isin(episodes, terminal)
    keep = ~np.isin(episodes, aborted) & (~last | ends_terminal)
    if not keep.any():
        raise DatasetError("it has no usable transitions (every episode aborted, or one frame long)")
    now = np.flatnonzero(keep)
    following = np.where(last[now], now, now + 1)  # a terminal frame's next is masked
    observe = lambda rows: {  # noqa: E731
        "state": demos.states[rows],
        "images": {c: demos.images[c][rows] for c in cameras},
    }
    return Transitions(
        obs=observe(now),
        actions=spec.action.to_unit(demos.actions[now, 0]).astype(np.float32),
        rewards=frames["next.reward"].to_numpy().astype(np.float32)[now],
        terminated=(last & ends_terminal)[now].astype(np.float32),
        next_obs=observe(following),
    )


def _episodes_with(meta, column: str, value) -> np.ndarray:
    """The episode indices whose ``meta/episodes`` ``column`` equals ``value`` (none without the column)."""
    if column not in meta.columns:
        return np.zeros(0, np.int64)
    return meta.index[meta[column] == value].to_numpy()
