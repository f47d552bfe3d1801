"""Robot episodes into the LeRobot v3 dataset at ``data.record_dir`` (see :mod:`protos.episode_frames`)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from pathlib import Path

from protos import robot_link_pb2 as pb
from protos.env_spec import EnvSpec
from protos.episode_frames import (
    dataset_features,
    features_mismatch,
    features_of,
    robot_episode_frames,
    robot_type,
)
from protos.lerobot_dataset import DEFAULT_VIDEO, EpisodeFrames, LeRobotWriter, VideoFormat
from trainer.server.episodes import RobotEpisode
from trainer.server.judged_episodes import JudgedEpisodes

log = logging.getLogger(__name__)


def to_frames(episode: RobotEpisode, judged: JudgedEpisodes | None = None) -> EpisodeFrames:
    """The episode's frames; with ``judged`` (serve train mode), the rewards and success its reward
    source judged replace the agent's, and the episode says which source that was."""
    frames = robot_episode_frames(episode.robot_id, episode.spec, episode.observations, episode.end)
    if judged is None:
        return frames
    steps = judged.take(episode.robot_id, episode.episode_id)
    if steps is None:
        frames.extra["reward_source"] = "env"  # not played by the pool: the agent's own values
        return frames
    reward, success = frames.scalars["next.reward"].copy(), frames.scalars["next.success"].copy()
    for step, (value, won) in steps.items():
        if 1 <= step <= len(reward):  # observation ``step`` carries the transition out of frame step - 1
            reward[step - 1], success[step - 1] = value, won
    frames.scalars.update({"next.reward": reward, "next.success": success})
    frames.extra.update(reward_source=judged.source, success=bool(success.any()))
    return frames


class LeRobotEpisodeSink:
    """An :class:`~trainer.server.episodes.EpisodeSink` that writes a LeRobot v3 dataset.

    Several store threads may call it at once: each encodes its episode's videos on its own, and
    the dataset's files and metadata are appended under one lock.
    """

    def __init__(
        self,
        root: str,
        video: VideoFormat = DEFAULT_VIDEO,
        judged: JudgedEpisodes | None = None,
        features: Mapping[str, object] | None = None,
    ) -> None:
        self.root, self.video = root, video
        self.judged = judged  # serve train mode: the reward source's values replace the agent's
        # The run's schema (data.features, in features_of's form): robots that do not fit are refused
        # whoever connected first. None: the dataset's, else the first connected robot's.
        self.features = features
        self.writer: LeRobotWriter | None = None
        self._empty: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def has(self, episode_id: str, robot_id: str | None = None) -> bool:
        with self._lock:
            if any(e == episode_id and robot_id in (None, r) for r, e in self._empty):
                return True
            self._open_existing()
            source = None if robot_id is None else f"robot:{robot_id}"
            return self.writer is not None and any(
                e.get("episode_id") == episode_id and source in (None, e.get("source"))
                for e in self.writer.episodes
            )

    def store(self, episode: RobotEpisode) -> None:
        if episode.end.num_steps == 0:
            with self._lock:  # aborted before its first action: nothing to learn from
                self._empty.add((episode.robot_id, episode.episode_id))
            return
        with self._lock:
            if self.writer is None:
                self._open_existing()
            if self.writer is None:
                self.writer = LeRobotWriter(
                    self.root,
                    fps=episode.spec.control_hz,
                    robot_type=robot_type(episode.spec),
                    video=self.video,
                )
            writer = self.writer
        frames = to_frames(episode, self.judged)  # may wait for the pool to finish judging it
        staged = writer.stage(frames)  # the slow part (video encoding), outside the lock
        with self._lock:
            index = writer.commit(staged)
        log.info("recorded episode %d (%s, %d steps, %s)", index, episode.episode_id, episode.end.num_steps,
                 pb.EpisodeEvent.Kind.Name(episode.end.kind))  # fmt: skip

    def features_mismatch(self, spec: EnvSpec, live: list[EnvSpec]) -> str | None:
        """Against the dataset's features once it has episodes, else the run's (``features``), else a
        connected robot's."""
        with self._lock:
            self._open_existing()
            info = self.writer.info if self.writer is not None else None
        if info is not None and info.get("total_episodes"):
            return features_mismatch(dataset_features(info), spec)
        if self.features is not None:
            return features_mismatch(self.features, spec)
        return features_mismatch(features_of(live[0]), spec) if live else None

    def _open_existing(self) -> None:
        if self.writer is None:
            info = Path(self.root) / "meta" / "info.json"
            if info.exists():
                fps = float(json.loads(info.read_text())["fps"])
                self.writer = LeRobotWriter(self.root, fps=fps, video=self.video)
