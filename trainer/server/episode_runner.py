"""Driving episodes on a connected robot: the one way the trainer does it.

:class:`LiveEpisode` runs on the link server's event loop: ``start`` begins an episode and returns
its first observation; ``play`` sends an action chunk and collects the observation of every tick
it ran, until the chunk is done, the episode ends, or (``replan_after``) a fresh observation asks
for a new chunk. Two consumers sit on it: :func:`run_episode` (collect, eval and DAgger: a policy
answers each new step, receding horizon) and :class:`~trainer.server.remote_env.RemoteRobotEnv`
(the env contract for the training thread: a chunk per step).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from protos import robot_link_pb2 as pb
from trainer.server.session import RobotSession, RobotUnavailable

log = logging.getLogger(__name__)

# A remote policy: the newest observation in, an action chunk ``[chunk, action_dim]`` (or one action)
# out. It may be a coroutine function, so that heavy work (decoding, inference) runs off the loop.
RemotePolicy = Callable[[pb.Observation], np.ndarray | Awaitable[np.ndarray]]


@dataclass
class ChunkOutcome:
    """What one action chunk did on a robot: the observation after each executed tick, and the end."""

    observations: list[pb.Observation]
    end: pb.EpisodeEvent | None  # set when the episode ended during the chunk
    aborted: bool = False  # the robot dropped, or the agent aborted the episode
    robot_left: bool = False  # the robot's stream ended (then ``end`` is an ABORTED made here)
    latest: pb.Observation | None = None  # the newest observation seen (to answer with a new chunk)
    missed_ticks: int = 0  # ticks the robot held after the observation this chunk answers (it was late)

    @property
    def done(self) -> bool:
        return self.aborted or self.end is not None


@dataclass(frozen=True)
class EpisodeEnd:
    """How an episode ended: the agent's end event, and whether the robot's stream ended under it
    (then ``event`` is an ``ABORTED`` made here, and the robot is gone)."""

    event: pb.EpisodeEvent
    robot_left: bool = False

    def __getattr__(self, name: str):
        """The end event's fields (``kind``, ``episode_id``, ``num_steps``, ``success``, ``reason``)."""
        if name == "event":  # not set yet (a copy or unpickling under way): no recursion
            raise AttributeError(name)
        return getattr(self.event, name)


class LiveEpisode:
    """One episode at a time on one robot's session; every method runs on the server's loop."""

    def __init__(
        self,
        session: RobotSession,
        step_timeout_s: float = 10.0,
        end_timeout_s: float = 2.0,
        policy_version: int = 0,
    ) -> None:
        self.session = session
        self.policy_version = policy_version  # stamped on every chunk; the agent echoes it per step
        self.step_timeout_s = step_timeout_s
        self.end_timeout_s = end_timeout_s  # how long to wait for the agent's end event
        self.episode_id = ""
        self.last: pb.Observation | None = None  # the newest observation of this episode

    async def start(self, seed: int | None = 0) -> pb.Observation:
        """Start an episode; its first observation. Raises :class:`RobotUnavailable` or a timeout."""
        session = self.session
        await self._settle()
        session.send_command(pb.Command.START_EPISODE, seed=int(seed or 0))
        while True:
            event = await asyncio.wait_for(session.events.get(), self.step_timeout_s + 30.0)
            if event.kind == pb.EpisodeEvent.STARTED:
                self.episode_id = event.episode_id
                break
        last = -1
        while True:
            observation = await session.next_observation(last, timeout=self.step_timeout_s)
            last = observation.seq
            if observation.episode_id == self.episode_id:
                self.last = observation
                return observation

    async def _settle(self) -> None:
        """Right after an episode, give the agent a few ticks to close it (its last observation, the
        spool write) before the next one starts: an episode started during that work began with a
        burst of late observations, whose first tick a teleoperator drove before the policy could answer."""
        session, loop = self.session, asyncio.get_running_loop()
        latest = session.latest
        if latest is None or not latest.episode_id:
            return
        deadline, last = loop.time() + 4.0 / session.spec.control_hz, latest.seq
        while (remaining := deadline - loop.time()) > 0:
            try:
                observation = await session.next_observation(last, timeout=remaining)
            except asyncio.TimeoutError:
                return
            if not observation.episode_id:
                return
            last = observation.seq

    async def play(self, actions: np.ndarray, replan_after: int | None = None) -> ChunkOutcome:
        """Send ``[chunk, action_dim]`` answering the newest observation; collect each tick's.

        Returns after every action ran, or the episode ended, or ``replan_after`` ticks ran or the
        robot ran dry (holding): then ``latest`` is the observation a new chunk should answer.
        """
        assert self.last is not None, "start() before play()"
        try:
            return await self._play(actions, replan_after)
        except RobotUnavailable:
            left = pb.EpisodeEvent(
                kind=pb.EpisodeEvent.ABORTED, episode_id=self.episode_id, reason="robot disconnected"
            )
            return ChunkOutcome([], left, aborted=True, robot_left=True)

    async def _play(self, actions: np.ndarray, replan_after: int | None) -> ChunkOutcome:
        assert self.last is not None
        session, start_step, last_seq = self.session, self.last.step, self.last.seq
        session.send_actions(actions, last_seq, policy_version=self.policy_version)
        played: list[pb.Observation] = []
        wanted = len(actions) if replan_after is None else min(replan_after, len(actions))
        missed = 0
        while True:
            held = False
            for observation in await session.observations_after(last_seq, timeout=self.step_timeout_s):
                last_seq = observation.seq
                if observation.episode_id != self.episode_id:  # ended without a newer step
                    return await self._finish(played, missed)
                if observation.step > start_step + len(played):
                    played.append(observation)
                    self.last = observation
                    transition = observation.transition
                    if transition.terminated or transition.truncated:
                        return await self._finish(played, missed)
                    if len(played) == wanted:
                        return ChunkOutcome(played, None, latest=observation, missed_ticks=missed)
                    held = False  # a late chunk ran after all
                elif observation.holding:
                    self.last, held = observation, True
                    missed += 1
            if not held:  # the newest observation of the batch is a step: the chunk runs on
                continue
            # The chunk missed its tick or ran dry. Answer the newest observation of the batch, never an
            # older one: an answer to a backlogged observation is stale on arrival, and so is the next.
            if replan_after is not None:  # a fresh chunk from the policy
                return ChunkOutcome(played, None, latest=self.last, missed_ticks=missed)
            session.send_actions(actions[len(played) :], self.last.seq, policy_version=self.policy_version)

    async def abort(self, reason: str) -> EpisodeEnd:
        """Stop the episode on the robot as ``ABORTED`` with ``reason``; how it ended."""
        with contextlib.suppress(RobotUnavailable):  # gone already: the abort is made below
            self.session.send_command(pb.Command.STOP_EPISODE, reason=reason)
        end = await self._end_event()
        if end is None:  # the agent said nothing (or left): the abort is made here
            end = pb.EpisodeEvent(kind=pb.EpisodeEvent.ABORTED, episode_id=self.episode_id, reason=reason)
        return EpisodeEnd(end, robot_left=self.session.state == "disconnected")

    async def _finish(self, played: list[pb.Observation], missed: int) -> ChunkOutcome:
        end = await self._end_event()
        aborted = end is not None and end.kind == pb.EpisodeEvent.ABORTED
        if end is None:  # the agent said nothing: treat the episode as ended by its last transition
            end = pb.EpisodeEvent(
                kind=pb.EpisodeEvent.ENDED, episode_id=self.episode_id, num_steps=len(played)
            )
        return ChunkOutcome(played, end, aborted, latest=self.last, missed_ticks=missed)

    async def _end_event(self) -> pb.EpisodeEvent | None:
        try:
            while True:
                event = await asyncio.wait_for(self.session.events.get(), self.end_timeout_s)
                if event.episode_id == self.episode_id and event.kind != pb.EpisodeEvent.STARTED:
                    return event
        except asyncio.TimeoutError:
            return None


async def run_episode(
    session: RobotSession,
    policy: RemotePolicy,
    seed: int = 0,
    step_timeout_s: float = 5.0,
    policy_version: int = 0,
    stall_timeout_s: float = 15.0,
) -> EpisodeEnd:
    """Run one episode to its end, the policy answering every new step; how it ended (``ENDED`` or
    ``ABORTED``). Raises :class:`RobotUnavailable` or a timeout if the robot never starts it.

    An episode in which the robot takes no step for ``stall_timeout_s`` (it holds: every chunk came
    too late for its ticks) is stopped and ends ``ABORTED``, its reason naming the policy's latency."""
    loop = asyncio.get_running_loop()
    episode = LiveEpisode(session, step_timeout_s, step_timeout_s, policy_version)
    observation = await episode.start(seed)
    dim = session.spec.action.dim
    last_step_at = loop.time()
    while True:
        asked_at = loop.time()
        actions = policy(observation)
        if inspect.isawaitable(actions):
            actions = await actions
        actions = np.asarray(actions, np.float32).reshape(-1, dim)
        answer_s = loop.time() - asked_at
        outcome = await episode.play(actions, replan_after=1)
        if outcome.done:
            assert outcome.end is not None
            return EpisodeEnd(outcome.end, robot_left=outcome.robot_left)
        assert outcome.latest is not None
        observation = outcome.latest
        if outcome.observations:
            last_step_at = loop.time()
        elif loop.time() - last_step_at > stall_timeout_s:
            reason = _stall_reason(stall_timeout_s, answer_s, len(actions), session.spec.control_hz)
            log.warning("robot %s: %s", session.robot_id, reason)
            return await episode.abort(reason)


def _stall_reason(stalled_s: float, answer_s: float, chunk: int, hz: float) -> str:
    """Why an episode whose robot held for ``stalled_s`` is stopped, with the policy's numbers."""
    return (
        f"no step in {stalled_s:.0f} s: the policy answers in {answer_s * 1000:.0f} ms, but a chunk of "
        f"{chunk} lasts {chunk / hz * 1000:.0f} ms at {hz:g} Hz, so its chunks arrive stale and the robot "
        "holds (use a longer chunk, a lower control rate or a faster device)"
    )
