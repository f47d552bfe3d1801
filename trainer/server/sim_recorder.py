"""Sim episodes of a co-training run into their own LeRobot v3 dataset.

Robot episodes arrive assembled from the link; sim episodes are gathered here from the pool's
steps, one frame per tick, and written on the server's store thread when they end. They get their
own dataset because a LeRobot dataset has one fixed feature set, and sim and robot cameras may
differ. Only one-action chunks are recorded: a longer chunk hides the observations in between.
"""

from __future__ import annotations

import logging
import uuid
from concurrent.futures import Executor
from typing import Any

import numpy as np

from protos.batch import ChunkResult
from protos.env_spec import EnvSpec
from protos.episode_frames import HUMAN_ACTION, POLICY_ACTION, robot_type, vector_names
from protos.lerobot_dataset import DEFAULT_VIDEO, EpisodeFrames, LeRobotWriter, VideoFormat

log = logging.getLogger(__name__)


class SimEpisodeRecorder:
    """Buffers each sim slot's current episode; a finished one is written by ``executor``."""

    def __init__(
        self, root: str, spec: EnvSpec, num_envs: int, executor: Executor, video: VideoFormat = DEFAULT_VIDEO
    ):
        self.spec, self.executor = spec, executor
        self.writer = LeRobotWriter(root, fps=spec.control_hz, robot_type=robot_type(spec), video=video)
        self.source = f"sim:{spec.name}"
        self._frames: list[list[dict[str, Any]]] = [[] for _ in range(num_envs)]
        self._warned = False
        self.recorded = 0

    def record(self, obs: dict[str, Any], actions: np.ndarray, result: ChunkResult) -> None:
        """One pool step of the sim slots: ``obs`` before it, the actions, and what followed."""
        if actions.shape[1] != 1:
            if not self._warned:
                log.warning(
                    "sim episodes are not recorded with action chunks of %d (one frame per tick)",
                    actions.shape[1],
                )
                self._warned = True
            return
        for i, frames in enumerate(self._frames):
            frames.append({
                "state": np.asarray(obs["state"][i], np.float32),
                "images": {name: obs["images"][name][i] for name in self.spec.camera_names},
                "instruction": obs["instruction"][i] if obs.get("instruction") else self.spec.instruction,
                "action": np.asarray(actions[i, 0], np.float32),
                "reward": float(result.rewards[i, 0]),
                "success": bool(result.success[i, 0]),
            })  # fmt: skip
            if result.done[i]:
                self._write(i, "terminated" if result.terminated[i].any() else "truncated")

    def discard_partial(self) -> None:
        """Drop episodes cut by a reset (the next iteration starts every env afresh)."""
        self._frames = [[] for _ in self._frames]

    def _write(self, slot: int, reason: str) -> None:
        frames, self._frames[slot] = self._frames[slot], []
        steps = len(frames)
        actions = np.stack([f["action"] for f in frames])
        episode = EpisodeFrames(
            task=frames[0]["instruction"],  # the episode's own words (a task may draw them per episode)
            images={name: [f["images"][name] for f in frames] for name in self.spec.camera_names},
            vectors={
                "observation.state": np.stack([f["state"] for f in frames]),
                "action": actions,
                POLICY_ACTION: actions,
                HUMAN_ACTION: np.zeros_like(actions),
            },
            scalars={
                "next.reward": np.array([f["reward"] for f in frames], np.float32),
                "next.done": np.arange(steps) == steps - 1,
                "next.success": np.array([f["success"] for f in frames], bool),
                "intervention": np.zeros(steps, bool),
            },
            extra={
                "episode_id": f"sim-{uuid.uuid4().hex[:12]}",
                "source": self.source,
                "aborted": False,
                "success": bool(frames[-1]["success"]),
                "end_reason": reason,
            },
            names=vector_names(self.spec),
        )
        self.executor.submit(self._store, episode)

    def _store(self, episode: EpisodeFrames) -> None:
        try:
            self.writer.add_episode(episode)
            self.recorded += 1
        except Exception:  # a failed write must not stop training; it is logged with its cause
            log.exception("could not record a sim episode")
