"""A robot episode (the agent's observations and how it ended) laid out as LeRobot v3 frames.

Frame ``t`` holds observation ``t`` and what was done from it: the executed action (after the
agent's safety), the policy's action, the human's action, the intervention flag, and the reward /
done / success that followed. The episode row carries its robot-side id, source and how it ended,
so a resent episode is recognised and stored once. Used by the trainer's recorder and by the
agent's own recording in ``rlinf-robot teleop``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import EnvSpec
from protos.lerobot_dataset import EpisodeFrames


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
            "action.policy": np.asarray([_vector(t.policy_action, dim) for t in outcomes], np.float32),
            "action.human": np.asarray([_vector(t.human_action, dim) for t in outcomes], np.float32),
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
    )
