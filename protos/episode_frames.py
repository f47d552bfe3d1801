"""A robot episode (the agent's observations and how it ended) laid out as LeRobot v3 frames.

Frame ``t`` holds observation ``t`` and what was done from it: the executed action (after the
agent's safety), the policy's action, the human's action, the intervention flag, and the reward /
done / success that followed. The policy's and the human's actions are ``complementary_info.*``
columns, as in LeRobot's own intervention recordings: every key that starts with ``action`` is an
output to LeRobot's policies, and a robot has one action. The episode row carries its robot-side id, source and how it ended,
so a resent episode is recognised and stored once. Used by the trainer's recorder and by the
agent's own recording in ``rlinf-robot teleop``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import overload

import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import EnvSpec
from protos.lerobot_dataset import EpisodeFrames

POLICY_ACTION = "complementary_info.policy_action"
HUMAN_ACTION = "complementary_info.human_action"


def robot_type(spec: EnvSpec) -> str:
    """The robot model for a dataset's ``robot_type`` (``franka``, ``dual-franka``), not a robot's id."""
    return str(spec.metadata.get("robot") or spec.name)


def vector_names(spec: EnvSpec) -> dict[str, list[str]]:
    """A name per dimension of each vector feature: ``tcp_pos.0`` ... for the state, the action's names."""
    action = list(spec.action.names)
    return {
        "observation.state": spec.state_names(),
        "action": action,
        POLICY_ACTION: action,
        HUMAN_ACTION: action,
    }


SCALARS = ("next.reward", "next.done", "next.success", "intervention")
INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def features_of(spec: EnvSpec) -> dict[str, object]:
    """What a robot's episodes look like in a dataset: rate, cameras, vector dims and columns."""
    images = [f"observation.images.{c.name}" for c in spec.cameras]
    return {
        "fps": float(spec.control_hz),
        "cameras": {c.name: [c.height, c.width, 3] for c in spec.cameras},
        "observation.state": spec.state_dim,
        "action": spec.action.dim,
        "columns": sorted([*images, *vector_names(spec), *SCALARS]),
    }


def dataset_features(info: Mapping) -> dict[str, object]:
    """A recorded dataset's features (its ``info.json``) in the form of :func:`features_of`."""
    features = info["features"]
    prefix = "observation.images."
    return {
        "fps": float(info["fps"]),
        "cameras": {k[len(prefix) :]: list(f["shape"]) for k, f in features.items() if k.startswith(prefix)},
        "observation.state": features.get("observation.state", {}).get("shape", [None])[0],
        "action": features.get("action", {}).get("shape", [None])[0],
        "columns": sorted(k for k in features if k not in INDEX_COLUMNS),
    }


def features_mismatch(expected: Mapping[str, object], spec: EnvSpec) -> str | None:
    """One line naming each feature that differs, or None."""
    given = features_of(spec)
    problems = [
        f"{key} {given[key]} (expected {expected[key]})" for key in expected if given[key] != expected[key]
    ]
    return "; ".join(problems) or None


class CameraFrames(Sequence[np.ndarray]):
    """One camera's frames of an episode, decoded when read (an episode is never decoded whole)."""

    def __init__(self, observations: Sequence[pb.Observation], spec: EnvSpec, camera: str) -> None:
        self._observations, self._camera = observations, spec.camera(camera)

    def __len__(self) -> int:
        return len(self._observations)

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...
    @overload
    def __getitem__(self, index: slice) -> list[np.ndarray]: ...
    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        for frame in self._observations[index].frames:
            if frame.camera == self._camera.name:
                return np.array(link_codec.decode_frame(frame, self._camera))
        raise link_codec.LinkCodecError(f"observation {index} has no frame of camera {self._camera.name!r}")


def _vector(values, dim: int) -> np.ndarray:
    return np.asarray(values, np.float32) if len(values) == dim else np.zeros(dim, np.float32)


def robot_episode_frames(
    robot_id: str, spec: EnvSpec, observations: Sequence[pb.Observation], end: pb.EpisodeEvent
) -> EpisodeFrames:
    """Observations ``0..num_steps`` (each after the first carries the transition into it) as frames."""
    steps = end.num_steps
    if steps < 1 or len(observations) < steps + 1:
        raise ValueError(f"episode {end.episode_id!r} needs observations 0..{steps}, has {len(observations)}")
    outcomes = [o.transition for o in observations[1 : steps + 1]]
    observations = list(observations[:steps])
    for obs in observations:  # the camera set of every step, before any frame is decoded
        names = sorted(f.camera for f in obs.frames)
        if names != sorted(spec.camera_names):
            raise link_codec.LinkCodecError(
                f"observation {obs.step} cameras expected {sorted(spec.camera_names)}, got {names}"
            )
    images = {name: CameraFrames(observations, spec, name) for name in spec.camera_names}
    dim = spec.action.dim
    return EpisodeFrames(
        task=observations[0].instruction or spec.instruction,
        images=images,
        vectors={
            "observation.state": np.asarray([o.state for o in observations], np.float32),
            "action": np.asarray([t.executed_action for t in outcomes], np.float32).reshape(steps, dim),
            # Zeros where a step has none: no human action when no human drove or advised, no policy
            # action when the policy never answered a tick the human drove. ``intervention`` says who drove.
            POLICY_ACTION: np.asarray([_vector(t.policy_action, dim) for t in outcomes], np.float32),
            HUMAN_ACTION: np.asarray([_vector(t.human_action, dim) for t in outcomes], np.float32),
        },
        scalars={
            "next.reward": np.asarray([t.reward for t in outcomes], np.float32),
            "next.done": np.arange(steps) == steps - 1,
            "next.success": np.asarray([t.success for t in outcomes], bool),
            "intervention": np.asarray([t.intervened for t in outcomes], bool),
        },
        extra={
            "episode_id": end.episode_id,
            "source": f"robot:{robot_id}",
            "aborted": end.kind == pb.EpisodeEvent.ABORTED,
            "success": bool(end.success),
            "end_reason": end.reason,
        },
        names=vector_names(spec),
    )
