"""What a LeRobot v3 dataset becomes for behaviour cloning: states, camera frames and action chunks.

Frame ``t``'s target is its action and the next ``chunk_size - 1`` actions of the same episode. A
target step is valid only up to the episode's end and while the selection lasts: with
``interventions`` a chunk that starts in a human-driven segment stops where the human handed back,
so the policy never learns the robot's own actions, or what followed them, as the human's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from protos.env_spec import EnvSpec
from protos.episode_frames import vector_names
from protos.lerobot_dataset import DatasetError
from protos.lerobot_reader import read_camera, read_frames, read_tasks

SELECTIONS = ("all", "interventions", "labelled")


@dataclass
class Demonstrations:
    """Frames to fit: ``actions[n, k]`` is the action ``k`` steps after frame ``n``, in the env's units."""

    states: np.ndarray  # float32 [N, D]
    actions: np.ndarray  # float32 [N, chunk, A]
    action_valid: np.ndarray  # bool [N, chunk]: False past the episode's end or outside the selection
    images: dict[str, np.ndarray] = field(default_factory=dict)  # camera -> uint8 [N, H, W, 3]
    instructions: list[str] = field(default_factory=list)  # the task text of each frame ("" if none)
    state_names: list[str] | None = None  # the dataset's name for each state dimension, if it has them

    def __len__(self) -> int:
        return len(self.states)

    @staticmethod
    def concatenate(parts: list[Demonstrations]) -> Demonstrations:
        if not parts:
            raise ValueError("no demonstrations to concatenate")
        parts = [p for p in parts if len(p)] or parts[:1]  # an empty part's images have no real shape
        return Demonstrations(
            states=np.concatenate([p.states for p in parts]),
            actions=np.concatenate([p.actions for p in parts]),
            action_valid=np.concatenate([p.action_valid for p in parts]),
            images={c: np.concatenate([p.images[c] for p in parts]) for c in parts[0].images},
            instructions=[text for p in parts for text in p.instructions],
            state_names=parts[0].state_names,
        )


def selected(frames, action_key: str, selection: str) -> np.ndarray:
    """Which frames to learn from: ``all``, the human-driven ones, or those with a non-zero label."""
    if selection not in SELECTIONS:
        raise ValueError(f"frame selection must be one of {SELECTIONS}, got {selection!r}")
    for column in ("observation.state", action_key):
        if column not in frames.columns:
            raise DatasetError(f"the dataset has no {column!r} column; it has {sorted(frames.columns)}")
    if selection == "interventions":
        if "intervention" not in frames.columns:
            raise DatasetError("only_interventions needs the dataset's 'intervention' column")
        return frames["intervention"].to_numpy().astype(bool)
    if selection == "labelled":
        return np.abs(np.stack(frames[action_key].to_numpy())).sum(axis=1) > 0
    return np.ones(len(frames), bool)


def chunk_targets(
    actions: np.ndarray, episodes: np.ndarray, keep: np.ndarray, chunk_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """For every frame, its action and the next ``chunk_size - 1`` ([N, chunk, A]) with their validity."""
    n = len(actions)
    later = np.arange(n)[:, None] + np.arange(chunk_size)[None, :]  # [N, chunk]
    inside = later < n
    later = np.minimum(later, n - 1)
    valid = inside & (episodes[later] == episodes[:, None]) & keep[later]
    return actions[later], np.logical_and.accumulate(valid, axis=1)  # once out, out for the rest


def load_demonstrations(
    root: str | Path,
    action_key: str = "action",
    selection: str = "all",
    chunk_size: int = 1,
    cameras: tuple[str, ...] | list[str] = (),
    frames=None,
) -> Demonstrations:
    """The selected frames of one dataset, with chunked action targets and the listed cameras' frames
    (``frames``: the dataset's frames when the caller has read them already)."""
    frames = read_frames(root) if frames is None else frames
    keep = selected(frames, action_key, selection)
    actions = np.stack(frames[action_key].to_numpy()).astype(np.float32)
    episodes = frames["episode_index"].to_numpy()
    targets, valid = chunk_targets(actions, episodes, keep, chunk_size)
    images = {}
    kept_episodes, kept_steps = episodes[keep], frames["frame_index"].to_numpy()[keep]
    for camera in cameras:
        per_episode = read_camera(root, camera, np.unique(kept_episodes))
        images[camera] = (
            np.stack([per_episode[e][t] for e, t in zip(kept_episodes, kept_steps)])
            if keep.any()
            else np.zeros((0, 1, 1, 3), np.uint8)
        )
    tasks = read_tasks(root)
    task_indices = frames["task_index"].to_numpy()[keep] if "task_index" in frames.columns else []
    return Demonstrations(
        states=np.stack(frames["observation.state"].to_numpy()).astype(np.float32)[keep],
        actions=targets[keep],
        action_valid=valid[keep],
        images=images,
        instructions=[tasks.get(int(i), "") for i in task_indices] or [""] * int(keep.sum()),
        state_names=state_names(root),
    )


def state_names(root: str | Path) -> list[str] | None:
    """The dataset's per-dimension state names (``meta/info.json``), when it lists them."""
    info = json.loads((Path(root) / "meta" / "info.json").read_text())
    names = info.get("features", {}).get("observation.state", {}).get("names")
    return [str(n) for n in names] if isinstance(names, list) else None


def describe_empty(selection: str, action_key: str) -> str:
    """Why a selection left nothing to learn from, in one line."""
    return {
        "interventions": "the dataset has no intervened frames",
        "labelled": f"no frame has a {action_key!r} label",
        "all": "the dataset has no frames",
    }[selection]


def check_layout(
    demos: Demonstrations, spec: EnvSpec, chunk: int, cameras: list[str] | tuple[str, ...]
) -> None:
    """Raise :class:`DatasetError` (one line) unless the frames fit ``spec``: state and action sizes,
    the state's per-dimension names where the dataset lists them, the chunk length, camera shapes."""
    if len(demos) == 0:
        raise DatasetError("there are no frames to fit")
    if demos.states.shape[1] != spec.state_dim or demos.actions.shape[2] != spec.action.dim:
        raise DatasetError(
            f"the dataset has state {demos.states.shape[1]} / action {demos.actions.shape[2]}, "
            f"the env has state {spec.state_dim} / action {spec.action.dim}"
        )
    expected = vector_names(spec)["observation.state"]
    if demos.state_names is not None and demos.state_names != expected:
        at = next((i for i, (a, b) in enumerate(zip(demos.state_names, expected)) if a != b), 0)
        raise DatasetError(
            f"the dataset's state dimension {at} is {demos.state_names[at]!r}, the env's "
            f"{expected[at]!r}: it was recorded with another state layout"
        )
    if demos.actions.shape[1] != chunk:
        raise DatasetError(f"the targets are {demos.actions.shape[1]}-step chunks, the policy's {chunk}")
    for camera in cameras:
        want, have = tuple(spec.camera(camera).shape), demos.images[camera].shape[1:]
        if have != want:
            raise DatasetError(
                f"camera {camera!r} frames are {list(have)} in the dataset, the env's {list(want)}"
            )
