"""The agent's own LeRobot v3 recording (``rlinf-robot teleop``): spooled episodes into a dataset.

An episode goes from the spool into the dataset and is then deleted from the spool, in that order:
a process killed in between leaves it in both, and the next drain sees its ``episode_id`` already in
the dataset and only deletes it. Episodes the spool closed after a crash are recorded as aborted.
"""

from __future__ import annotations

import logging
from pathlib import Path

from protos import robot_link_pb2 as pb
from protos.env_spec import EnvSpec
from protos.episode_frames import dataset_features, features_mismatch, robot_episode_frames, robot_type
from protos.lerobot_dataset import DEFAULT_VIDEO, DatasetError, LeRobotWriter, VideoFormat
from robot_agent.spool import EpisodeSpool

log = logging.getLogger(__name__)


class LocalDataset:
    """Moves finished episodes from an :class:`EpisodeSpool` into a LeRobot v3 dataset at ``root``."""

    def __init__(
        self,
        root: str | Path,
        spool: EpisodeSpool,
        spec: EnvSpec,
        robot_id: str,
        video: VideoFormat = DEFAULT_VIDEO,
    ) -> None:
        try:
            import av  # noqa: F401
            import pandas  # noqa: F401
            import pyarrow  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                f"local recording needs pyarrow, pandas and av ({exc.name} is missing): pip install '.[robot,record]'"
            ) from None
        self.root, self.spool, self.spec, self.robot_id = Path(root), spool, spec, robot_id
        # Reopening checks the dataset's fps against this robot's rate (a DatasetError, a ValueError);
        # its cameras and dims are checked here too, before an episode is driven, not after.
        self.writer = LeRobotWriter(self.root, fps=spec.control_hz, robot_type=robot_type(spec), video=video)
        if self.writer.info is not None and self.writer.episodes:
            mismatch = features_mismatch(dataset_features(self.writer.info), spec)
            if mismatch:
                raise DatasetError(
                    f"{self.root} holds episodes of other features than this robot's: {mismatch}; "
                    "record into a new folder (--record-dir)"
                )

    def store(self, episode_id: str) -> pb.EpisodeEvent:
        """Record one finished spooled episode (if it has steps) and drop it from the spool."""
        end = self.spool.end_event(episode_id)
        recorded = any(e.get("episode_id") == episode_id for e in self.writer.episodes)
        if end.num_steps > 0 and not recorded:
            observations = list(self.spool.observations(episode_id))
            frames = robot_episode_frames(self.robot_id, self.spec, observations, end)
            index = self.writer.add_episode(frames)
            log.info("recorded episode %d (%s, %d steps)", index, episode_id, end.num_steps)
        self.spool.acknowledge(episode_id)
        return end

    def drain(self) -> int:
        """Record every finished episode waiting in the spool (left by an earlier, interrupted run)."""
        pending = self.spool.pending()
        for episode_id in pending:
            self.store(episode_id)
        return len(pending)

    @property
    def num_episodes(self) -> int:
        return len(self.writer.episodes)
