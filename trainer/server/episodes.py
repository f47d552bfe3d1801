"""Episodes arriving from robots: assembled from the live stream or from spool uploads, stored once.

A robot's episode is stored when its end event arrives and every step ``0..num_steps`` was seen;
otherwise the agent is told ``INCOMPLETE`` and uploads its spooled copy. Episode ids already stored
for the same robot are acknowledged again without storing twice, which is what makes the agent's
resend safe; ids are scoped by robot, so one robot can never have another's episode acknowledged.

What is buffered is bounded by the spec: at most ``LIVE_EPISODES`` open episodes of
``max_episode_steps + 1`` steps, and one upload of that length (see ``admission.session_budget``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from protos import robot_link_pb2 as pb
from protos.env_spec import EnvSpec
from trainer.server.admission import LIVE_EPISODES

StoreCall = Callable[[], pb.Ack]  # writes one episode (on a store thread) and returns its ack


@dataclass
class RobotEpisode:
    """A complete episode from one robot: observations ``0..num_steps`` and how it ended."""

    robot_id: str
    spec: EnvSpec
    observations: list[pb.Observation]
    end: pb.EpisodeEvent

    @property
    def episode_id(self) -> str:
        return self.end.episode_id

    @property
    def aborted(self) -> bool:
        return self.end.kind == pb.EpisodeEvent.ABORTED


class EpisodeSink(Protocol):
    """Where complete episodes go (a dataset writer, a replay buffer, a test's list). Thread-safe."""

    def has(self, episode_id: str, robot_id: str | None = None) -> bool:
        """Whether the episode is stored (for ``robot_id``, or for any robot when None)."""
        ...

    def store(self, episode: RobotEpisode) -> None: ...

    def features_mismatch(self, spec: EnvSpec, live: list[EnvSpec]) -> str | None:
        """Why episodes of ``spec`` could not be stored here (``live``: the other connected robots)."""
        ...


@dataclass
class MemoryEpisodeSink:
    """Keeps episodes in memory, in arrival order; takes any spec."""

    episodes: list[RobotEpisode] = field(default_factory=list)

    def has(self, episode_id: str, robot_id: str | None = None) -> bool:
        return any(e.episode_id == episode_id and robot_id in (None, e.robot_id) for e in list(self.episodes))

    def store(self, episode: RobotEpisode) -> None:
        self.episodes.append(episode)

    def features_mismatch(self, spec: EnvSpec, live: list[EnvSpec]) -> str | None:
        return None


@dataclass
class CountingEpisodeSink:
    """Acknowledges episodes and keeps only their ids: a trainer that records nothing (the link's
    benchmarks; a serve run's dataset writer also lets an episode go once it is on disk)."""

    stored: set[tuple[str, str]] = field(default_factory=set)  # (robot_id, episode_id)

    def has(self, episode_id: str, robot_id: str | None = None) -> bool:
        if robot_id is not None:
            return (robot_id, episode_id) in self.stored
        return any(e == episode_id for _, e in list(self.stored))

    def store(self, episode: RobotEpisode) -> None:
        self.stored.add((episode.robot_id, episode.episode_id))

    def features_mismatch(self, spec: EnvSpec, live: list[EnvSpec]) -> str | None:
        return None


class EpisodeAssembler:
    """Collects one robot's episodes. Its bookkeeping runs on the link's loop; for each end event or
    finished upload it returns the call that stores the episode (on a store thread) and gives the ack."""

    def __init__(self, robot_id: str, spec: EnvSpec, sink: EpisodeSink) -> None:
        self.robot_id, self.spec, self.sink = robot_id, spec, sink
        self._live: dict[str, dict[int, pb.Observation]] = {}
        self._uploads: dict[str, list[pb.Observation]] = {}
        self.stored = 0
        self.duplicates = 0

    def on_observation(self, obs: pb.Observation) -> None:
        if not obs.episode_id:
            return
        if obs.episode_id not in self._live and len(self._live) >= LIVE_EPISODES:
            # The oldest open episode never ended on the stream: its end will be INCOMPLETE and the
            # agent uploads it from its spool.
            del self._live[next(iter(self._live))]
        self._live.setdefault(obs.episode_id, {})[obs.step] = obs  # a hold re-sends a step: newest wins

    def forget_partial(self) -> None:
        """Free the open episodes and uploads (the link dropped: the agent's spool resends them)."""
        self._live.clear()
        self._uploads.clear()

    def end(self, end: pb.EpisodeEvent) -> StoreCall:
        """Close an ended episode on the stream (its observations leave the live set now, so newer
        episodes cannot push them out); the returned call stores it, on a store thread."""
        if end.num_steps > self.spec.max_episode_steps:
            raise ValueError(
                f"episode {end.episode_id!r} ends after {end.num_steps} steps, over max_episode_steps"
            )
        steps = self._live.pop(end.episode_id, {})
        if any(i not in steps for i in range(end.num_steps + 1)):
            return functools.partial(self._unless_stored, end, None)
        return functools.partial(self._unless_stored, end, [steps[i] for i in range(end.num_steps + 1)])

    def upload(self, part: pb.EpisodeUpload) -> StoreCall | None:
        """Add an upload part; on its last part, the call that stores the episode."""
        if part.part == 0:
            self._uploads.clear()  # one upload at a time; a restarted one starts over
            self._uploads[part.episode_id] = []
        buffer = self._uploads.get(part.episode_id)
        if buffer is None:
            raise ValueError(f"upload part {part.part} of episode {part.episode_id!r} without its part 0")
        buffer.extend(part.observations)
        if len(buffer) > self.spec.max_episode_steps + 1:
            raise ValueError(f"upload of episode {part.episode_id!r} is longer than max_episode_steps + 1")
        if not part.last:
            return None
        observations = self._uploads.pop(part.episode_id)
        self._live.pop(part.episode_id, None)
        steps = [o.step for o in observations]
        if steps != list(range(part.end.num_steps + 1)):
            raise ValueError(
                f"upload of episode {part.episode_id!r} has steps {steps[:5]}... for {part.end.num_steps} transitions"
            )
        return functools.partial(self._unless_stored, part.end, observations)

    def on_end(self, end: pb.EpisodeEvent) -> pb.Ack:
        """:meth:`end` and its store at once: the ack."""
        return self.end(end)()

    def on_upload(self, part: pb.EpisodeUpload) -> pb.Ack | None:
        """:meth:`upload` and, on the last part, its store: the ack."""
        store = self.upload(part)
        return store() if store is not None else None

    def _unless_stored(self, end: pb.EpisodeEvent, observations: list[pb.Observation] | None) -> pb.Ack:
        """Store the episode unless the sink has it (a resent one); ``None``: steps were missed."""
        if self.sink.has(end.episode_id, self.robot_id):
            self.duplicates += 1
            return pb.Ack(episode_id=end.episode_id, status=pb.Ack.STORED)
        if observations is None:
            return pb.Ack(episode_id=end.episode_id, status=pb.Ack.INCOMPLETE)
        return self._store(observations, end)

    def _store(self, observations: list[pb.Observation], end: pb.EpisodeEvent) -> pb.Ack:
        self.sink.store(RobotEpisode(self.robot_id, self.spec, observations, end))
        self.stored += 1
        return pb.Ack(episode_id=end.episode_id, status=pb.Ack.STORED)
