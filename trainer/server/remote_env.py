"""A connected robot behind the same env contract as the sim envs, plus a pool that mixes both.

The link server runs on its own event loop; the trainer steps envs from its own thread. A
:class:`RemoteRobotEnv` turns ``reset`` / ``step`` into commands and action chunks for the agent and
waits for the observation that comes back; frames are decoded in a thread pool, never on the event
loop. When the robot drops mid-episode the step comes back ``truncated`` with ``info["aborted"]``
(its transitions are not for training), and the env is unavailable until the robot reconnects.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import EnvSpec
from protos.validation import validate_action
from trainer.server.link_server import LinkServer
from trainer.server.session import RobotSession, RobotUnavailable


class RemoteRobotEnv:
    """One robot, by id. Synchronous API for the trainer's thread; talks to the server's loop."""

    def __init__(
        self, server: LinkServer, loop: asyncio.AbstractEventLoop, robot_id: str, decoder: ThreadPoolExecutor,
        step_timeout_s: float = 10.0,
    ) -> None:  # fmt: skip
        self.server, self.loop, self.robot_id, self.decoder = server, loop, robot_id, decoder
        self.step_timeout_s = step_timeout_s
        self.spec: EnvSpec = self._session().spec
        self.source = f"robot:{robot_id}"
        self._episode_id = ""
        self._last: pb.Observation | None = None

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

    # -- env contract ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        session = self._session()
        self._last = self._call(self._reset(session, seed))
        return self._decode(self._last), {"success": False, "source": self.source}

    def step(self, action) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        action = validate_action(self.spec, action, allow_chunk=True)
        assert self._last is not None, "reset() first"
        try:
            session = self._session()
            observation, end = self._call(self._step(session, action))
        except RobotUnavailable:
            info = {"success": False, "aborted": True, "source": self.source}
            return self._decode(self._last), 0.0, False, True, info
        self._last = observation
        transition = observation.transition
        aborted = end is not None and end.kind == pb.EpisodeEvent.ABORTED
        truncated = bool(transition.truncated) or aborted or (end is not None and not transition.terminated)
        info = {"success": bool(transition.success), "aborted": aborted, "source": self.source,
                "intervened": bool(transition.intervened)}  # fmt: skip
        return (
            self._decode(observation),
            float(transition.reward),
            bool(transition.terminated),
            truncated,
            info,
        )

    # -- on the server's loop -------------------------------------------------------------------
    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(self.step_timeout_s + 35.0)

    async def _reset(self, session: RobotSession, seed: int | None) -> pb.Observation:
        session.send_command(pb.Command.START_EPISODE, seed=int(seed or 0))
        while True:
            event = await asyncio.wait_for(session.events.get(), self.step_timeout_s + 30.0)
            if event.kind == pb.EpisodeEvent.STARTED:
                self._episode_id = event.episode_id
                break
        last = -1
        while True:
            observation = await session.next_observation(last, timeout=self.step_timeout_s)
            last = observation.seq
            if observation.episode_id == self._episode_id:
                return observation

    async def _step(
        self, session: RobotSession, action: np.ndarray
    ) -> tuple[pb.Observation, pb.EpisodeEvent | None]:
        assert self._last is not None
        step = self._last.step
        session.send_actions(action, self._last.seq)
        last = self._last.seq
        while True:
            observation = await session.next_observation(last, timeout=self.step_timeout_s)
            last = observation.seq
            if observation.episode_id != self._episode_id:
                return self._last, await self._end_event()  # the episode ended without a newer step
            if observation.step > step:
                end = (
                    await self._end_event()
                    if observation.transition.terminated or observation.transition.truncated
                    else None
                )
                return observation, end
            if observation.holding:  # the chunk missed its tick: answer the newest observation again
                session.send_actions(action, observation.seq)

    async def _end_event(self) -> pb.EpisodeEvent | None:
        session = self._session()
        try:
            while True:
                event = await asyncio.wait_for(session.events.get(), 2.0)
                if event.episode_id == self._episode_id and event.kind != pb.EpisodeEvent.STARTED:
                    return event
        except asyncio.TimeoutError:
            return None

    def _decode(self, observation: pb.Observation) -> dict[str, Any]:
        futures = {
            f.camera: self.decoder.submit(link_codec.decode_frame, f, self.spec.camera(f.camera))
            for f in observation.frames
        }
        return {
            "images": {name: future.result() for name, future in futures.items()},
            "state": np.asarray(observation.state, np.float32),
            "instruction": observation.instruction or self.spec.instruction,
        }


@dataclass
class PoolStep:
    """One step of every env in the pool, each transition tagged with its source and weight."""

    observations: list[dict[str, Any]]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: list[dict[str, Any]]
    sources: list[str] = field(default_factory=list)
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0))


class EnvPool:
    """N sim envs plus every connected robot, as one list of envs. Robots that join are added live.

    ``weights`` maps a source kind (``"sim"``, ``"robot"``) to a sampling weight, carried with each
    transition for the algorithms that use it. Envs auto-reset at the end of their episodes; a robot
    that drops is taken out of the step until it is back.
    """

    def __init__(
        self, sim_envs: list, server: LinkServer | None = None, loop: asyncio.AbstractEventLoop | None = None,
        weights: dict[str, float] | None = None, seed: int = 0,
    ) -> None:  # fmt: skip
        self.envs: list = list(sim_envs)
        self.sources = [f"sim:{env.unwrapped.env_spec.name}" for env in sim_envs]
        self.server, self.loop = server, loop
        self.weights = {"sim": 1.0, "robot": 1.0, **(weights or {})}
        self.decoder = ThreadPoolExecutor(4, thread_name_prefix="frame-decode")
        self.seed = seed
        self._episodes = 0
        self._observations: list[dict[str, Any] | None] = [None] * len(self.envs)
        self.refresh()

    def refresh(self) -> list[str]:
        """Add robots that connected since the last call; returns the ids added."""
        if self.server is None:
            return []
        known = {env.robot_id for env in self.envs if isinstance(env, RemoteRobotEnv)}
        added = []
        for robot_id, session in list(self.server.sessions.items()):
            if robot_id not in known and session.state != "disconnected":
                self.envs.append(RemoteRobotEnv(self.server, self.loop, robot_id, self.decoder))
                self.sources.append(f"robot:{robot_id}")
                self._observations.append(None)
                added.append(robot_id)
        return added

    def reset(self) -> list[dict[str, Any] | None]:
        for index in range(len(self.envs)):
            self._reset_one(index)
        return list(self._observations)

    def _reset_one(self, index: int) -> None:
        env = self.envs[index]
        if isinstance(env, RemoteRobotEnv) and not env.available:
            self._observations[index] = None
            return
        self._episodes += 1
        self._observations[index], _ = env.reset(seed=self.seed + self._episodes)

    def step(self, actions: list) -> PoolStep:
        """Step every env that has an observation; ``actions[i]`` is for env ``i``."""
        self.refresh()
        n = len(self.envs)
        result = PoolStep(
            [None] * n, np.zeros(n), np.zeros(n, bool), np.zeros(n, bool), [{} for _ in range(n)]
        )
        result.sources = list(self.sources)
        result.weights = np.array([self.weights[s.split(":")[0]] for s in self.sources])
        for index, env in enumerate(self.envs):
            if self._observations[index] is None:
                self._reset_one(index)  # a robot that came back, or one added this step
                result.observations[index] = self._observations[index]
                result.infos[index] = {"source": self.sources[index], "skipped": True}
                continue
            obs, reward, terminated, truncated, info = env.step(actions[index])
            info.setdefault("source", self.sources[index])
            result.observations[index], result.rewards[index] = obs, reward
            result.terminated[index], result.truncated[index], result.infos[index] = (
                terminated,
                truncated,
                info,
            )
            self._observations[index] = obs
            if terminated or truncated:
                self._reset_one(index)
        return result

    def close(self) -> None:
        for env in self.envs:
            if not isinstance(env, RemoteRobotEnv):
                env.close()
        self.decoder.shutdown(wait=False)
