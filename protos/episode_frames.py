"""A robot episode (the agent's observations and how it ended) laid out as LeRobot v3 frames.

Frame ``t`` holds observation ``t`` and what was done from it: the executed action (after the
agent's safety), the policy's action, the human's action, the intervention flag, and the reward /
done / success that followed. The episode row carries its robot-side id, source and how it ended,
so a resent episode is recognised and stored once. Used by the trainer's recorder and by the
agent's own recording in ``rlinf-robot teleop``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import EnvSpec
from protos.lerobot_dataset import EpisodeFrames


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
    observations = observations[:steps]
    images: dict[str, list[np.ndarray]] = {name: [] for name in spec.camera_names}
    for obs in observations:
        for name, image in link_codec.decode_images(obs.frames, spec).items():
            images[name].append(np.array(image))
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
