"""Robot episodes into the LeRobot v3 dataset at ``data.record_dir`` (see :mod:`protos.episode_frames`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from protos import robot_link_pb2 as pb
from protos.episode_frames import robot_episode_frames
from protos.lerobot_dataset import DEFAULT_VIDEO, EpisodeFrames, LeRobotWriter, VideoFormat
from trainer.server.episodes import RobotEpisode

log = logging.getLogger(__name__)


def to_frames(episode: RobotEpisode) -> EpisodeFrames:
    return robot_episode_frames(episode.robot_id, episode.spec, episode.observations, episode.end)


class LeRobotEpisodeSink:
    """An :class:`~trainer.server.episodes.EpisodeSink` that writes a LeRobot v3 dataset."""

    def __init__(self, root: str, video: VideoFormat = DEFAULT_VIDEO) -> None:
        self.root, self.video = root, video
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
                video=self.video,
            )
        index = self.writer.add_episode(to_frames(episode))
        log.info("recorded episode %d (%s, %d steps, %s)", index, episode.episode_id, episode.end.num_steps,
                 pb.EpisodeEvent.Kind.Name(episode.end.kind))  # fmt: skip

    def _open_existing(self) -> None:
        if self.writer is None:
            info = Path(self.root) / "meta" / "info.json"
            if info.exists():
                fps = float(json.loads(info.read_text())["fps"])
                self.writer = LeRobotWriter(self.root, fps=fps, video=self.video)
