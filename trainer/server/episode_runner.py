"""Drive one episode on a connected robot: start it, answer each step with an action chunk, wait for its end."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from protos import robot_link_pb2 as pb
from trainer.server.session import RobotSession, RobotUnavailable

# A remote policy: the newest observation in, an action chunk ``[chunk, action_dim]`` (or one action)
# out. It may be a coroutine function, so that heavy work (decoding, inference) runs off the loop.
RemotePolicy = Callable[[pb.Observation], np.ndarray | Awaitable[np.ndarray]]


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


async def run_episode(
    session: RobotSession, policy: RemotePolicy, seed: int = 0, step_timeout_s: float = 5.0
) -> EpisodeEnd:
    """Run one episode to its end and return how it ended (``ENDED`` or ``ABORTED``)."""
    session.send_command(pb.Command.START_EPISODE, seed=seed)
    episode_id = await _wait_event(session, pb.EpisodeEvent.STARTED, None, step_timeout_s + 30.0)
    answered_step, last_seq = -1, -1
    while True:
        end = _poll_end(session, episode_id)
        if end is not None:
            return EpisodeEnd(end)
        try:
            obs = await session.next_observation(last_seq, timeout=step_timeout_s)
        except RobotUnavailable:
            aborted = pb.EpisodeEvent(
                kind=pb.EpisodeEvent.ABORTED, episode_id=episode_id, reason="robot disconnected"
            )
            return EpisodeEnd(aborted, robot_left=True)
        last_seq = obs.seq
        if obs.episode_id != episode_id:
            continue
        if obs.step > answered_step or obs.holding:
            actions = policy(obs)
            if inspect.isawaitable(actions):
                actions = await actions
            session.send_actions(actions, obs.seq)
            answered_step = obs.step


def _poll_end(session: RobotSession, episode_id: str) -> pb.EpisodeEvent | None:
    while not session.events.empty():
        event = session.events.get_nowait()
        if event.episode_id == episode_id and event.kind in (pb.EpisodeEvent.ENDED, pb.EpisodeEvent.ABORTED):
            return event
    return None


async def _wait_event(session: RobotSession, kind: int, episode_id: str | None, timeout: float) -> str:
    async def wait() -> str:
        while True:
            event = await session.events.get()
            if event.kind == kind and episode_id in (None, event.episode_id):
                return event.episode_id

    return await asyncio.wait_for(wait(), timeout)
