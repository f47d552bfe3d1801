"""A connected robot behind the same env contract as the sim envs, plus a pool that mixes both.

The link server runs on its own event loop; the trainer steps envs from its own thread. A
:class:`RemoteRobotEnv` turns ``reset`` / ``step`` / ``play_chunk`` into commands and action chunks
for the agent and collects the observation of every tick that comes back; frames are decoded in a
thread pool, never on the event loop. When the robot drops mid-episode the episode is reported
aborted (its transitions are not for training), and the env is unavailable until the robot
reconnects.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np

from protos import robot_link_pb2 as pb
from protos.env_spec import EnvSpec
from protos.validation import validate_action
from trainer.server.episode_runner import ChunkOutcome, LiveEpisode
from trainer.server.frame_decoder import FrameDecoder
from trainer.server.link_server import LinkServer
from trainer.server.session import RobotSession, RobotUnavailable

log = logging.getLogger(__name__)


class RemoteRobotEnv:
    """One robot, by id. Synchronous API for the trainer's thread; talks to the server's loop."""

    def __init__(
        self, server: LinkServer, loop: asyncio.AbstractEventLoop, robot_id: str, decoder: FrameDecoder,
        step_timeout_s: float = 10.0,
    ) -> None:  # fmt: skip
        self.server, self.loop, self.robot_id, self.decoder = server, loop, robot_id, decoder
        self.step_timeout_s = step_timeout_s
        self.spec: EnvSpec = self._session().spec
        self.source = f"robot:{robot_id}"
        self._episode: LiveEpisode | None = None
        self._last: pb.Observation | None = None
        self.policy_version = 0  # sent with every chunk (the learner's update count in serve train)

    # -- availability ---------------------------------------------------------------------------
    def _session(self) -> RobotSession:
        session = self.server.sessions.get(self.robot_id)
        if session is None or session.state == "disconnected":
            raise RobotUnavailable(f"robot {self.robot_id!r} is not connected")
        return session

    @property
    def available(self) -> bool:
        try:
            self._session()
        except RobotUnavailable:
            return False
        return True

    @property
    def episode_id(self) -> str:
        """The episode the robot is playing for this env ("" before the first reset)."""
        return self._episode.episode_id if self._episode is not None else ""

    # -- env contract ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self._episode = LiveEpisode(self._session(), self.step_timeout_s)
        self._last = self._call(self._episode.start(seed))
        return self.decode(self._last), {"success": False, "source": self.source}

    def play_chunk(self, actions) -> ChunkOutcome:
        """Send ``[chunk, action_dim]`` (or one action) and collect the observation of every tick."""
        actions = validate_action(self.spec, actions, allow_chunk=True)
        if self._episode is None:
            raise RuntimeError(f"robot {self.robot_id}: reset() before stepping")
        if not self.available:
            return ChunkOutcome([], None, aborted=True, robot_left=True)
        self._episode.policy_version = self.policy_version
        outcome = self._call(self._episode.play(actions.reshape(-1, self.spec.action.dim)))
        if outcome.observations:
            self._last = outcome.observations[-1]
        return outcome

    def step(self, action) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Gymnasium-style step; a chunk plays every action and sums the rewards."""
        outcome = self.play_chunk(action)
        assert self._last is not None
        transition = self._last.transition if outcome.observations else pb.Transition()
        reward = float(sum(o.transition.reward for o in outcome.observations))
        terminated = bool(transition.terminated) and not outcome.aborted
        truncated = outcome.aborted or (outcome.done and not terminated)
        info = {"success": bool(transition.success), "aborted": outcome.aborted, "source": self.source,
                "intervened": bool(transition.intervened)}  # fmt: skip
        return self.decode(self._last), reward, terminated, truncated, info

    # -- on the server's loop -------------------------------------------------------------------
    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(self.step_timeout_s + 35.0)

    def decode(self, observation: pb.Observation) -> dict[str, Any]:
        """A wire observation as the env contract's dict; frames decoded by the pool's decoder."""
        return {
            "images": self.decoder.decode(observation.frames, self.spec),
            "state": np.asarray(observation.state, np.float32),
            "instruction": observation.instruction or self.spec.instruction,
        }
