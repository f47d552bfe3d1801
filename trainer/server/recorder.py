"""Robot episodes into the LeRobot v3 dataset: frames decoded, transitions laid out per step.

Frame ``t`` holds observation ``t`` and what was done from it: the executed action (after the
agent's safety), the policy's action, the intervention flag, and the reward / done / success that
followed. Each episode row also carries its robot-side id, source and how it ended, so a resent
episode is recognised and stored once.
"""

from __future__ import annotations

import logging

import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb
from trainer.data.lerobot_writer import EpisodeFrames, LeRobotWriter
from trainer.server.episodes import RobotEpisode

log = logging.getLogger(__name__)


def _vector(values, dim: int) -> np.ndarray:
    return np.asarray(values, np.float32) if len(values) == dim else np.zeros(dim, np.float32)


def to_frames(episode: RobotEpisode) -> EpisodeFrames:
    steps = episode.end.num_steps
    observations, outcomes = (
        episode.observations[:steps],
        [o.transition for o in episode.observations[1 : steps + 1]],
    )
    images: dict[str, list[np.ndarray]] = {name: [] for name in episode.spec.camera_names}
    for obs in observations:
        for name, image in link_codec.decode_images(obs.frames, episode.spec).items():
            images[name].append(np.array(image))
    dim = episode.spec.action.dim
    return EpisodeFrames(
        task=observations[0].instruction or episode.spec.instruction,
        images=images,
        vectors={
            "observation.state": np.asarray([o.state for o in observations], np.float32),
            "action": np.asarray([t.executed_action for t in outcomes], np.float32).reshape(steps, dim),
            # Zeros where a step has none: no human action off intervention, no policy action when the
            # human drove before any chunk arrived. ``intervention`` says which is which.
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
            "episode_id": episode.episode_id,
            "source": f"robot:{episode.robot_id}",
            "aborted": episode.aborted,
            "success": bool(episode.end.success),
            "end_reason": episode.end.reason,
        },
    )


class LeRobotEpisodeSink:
    """An :class:`~trainer.server.episodes.EpisodeSink` that writes a LeRobot v3 dataset."""

    def __init__(self, root: str, video_codec: str = "libx264") -> None:
        self.root, self.video_codec = root, video_codec
        self.writer: LeRobotWriter | None = None
        self._empty: set[str] = set()

    def has(self, episode_id: str) -> bool:
        if episode_id in self._empty:
            return True
        self._open_existing()
        return self.writer is not None and any(
            e.get("episode_id") == episode_id for e in self.writer.episodes
        )

    def store(self, episode: RobotEpisode) -> None:
        if episode.end.num_steps == 0:
            self._empty.add(episode.episode_id)  # aborted before its first action: nothing to learn from
            return
        if self.writer is None:
            self.writer = LeRobotWriter(
                self.root,
                fps=episode.spec.control_hz,
                robot_type=episode.robot_id,
                video_codec=self.video_codec,
            )
        index = self.writer.add_episode(to_frames(episode))
        log.info("recorded episode %d (%s, %d steps, %s)", index, episode.episode_id, episode.end.num_steps,
                 pb.EpisodeEvent.Kind.Name(episode.end.kind))  # fmt: skip

    def _open_existing(self) -> None:
        if self.writer is None:
            from pathlib import Path

            info = Path(self.root) / "meta" / "info.json"
            if info.exists():
                import json

                fps = float(json.loads(info.read_text())["fps"])
                self.writer = LeRobotWriter(self.root, fps=fps, video_codec=self.video_codec)
