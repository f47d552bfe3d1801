"""Sim envs and connected robots as one vector env, for co-training.

:class:`EnvPool` speaks :class:`~protos.batch.VectorEnv`'s batched contract (``reset``,
``chunk_step``, ``num_envs``, ``spec``), so every algorithm consumes it unchanged. Slots
``0..n_sim-1`` are the sim envs; the rest are robots. Each slot has a source tag (``sim:<task>``,
``robot:<id>``) and a sampling weight.

Membership changes only in :meth:`refresh`, which the runner calls between iterations: robots that
joined are added (if their spec fits), robots that left are removed. Within an iteration a robot
that drops keeps its slot as a dead one: its transitions come back invalid, and the episode it was
in is listed in ``ChunkResult.aborted`` so the algorithms drop it. Robot chunks play in threads
while the sim envs step, so the robots' real-time ticks overlap the simulation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from protos.batch import ChunkResult, EpisodeSummary, VectorEnv, concat_obs, select_row, stack_obs
from protos.env_spec import EnvSpec, spec_mismatch
from trainer.env_mix import slot_sources
from trainer.server.frame_decoder import make_frame_decoder
from trainer.server.judged_episodes import JudgedEpisodes
from trainer.server.link_server import LinkServer
from trainer.server.remote_env import RemoteRobotEnv
from trainer.server.reward_source import NOTHING_YET, EnvRewards, JudgedStep, RobotRewards
from trainer.server.session import RobotUnavailable

log = logging.getLogger(__name__)


@dataclass
class _RobotSlot:
    env: RemoteRobotEnv
    obs: dict[str, Any] | None = None  # the newest observation; None: the slot is dead this iteration
    episode_return: float = 0.0
    episode_length: int = 0
    episodes: int = 0
    rewards: RobotRewards = field(default_factory=EnvRewards)  # reward.source: judges each step
    last: JudgedStep = NOTHING_YET  # the newest judged step of the episode
    episode_id: str = ""  # the robot episode being played ("" before the first reset)
    steps_played: int = 0  # since the last robot_timing()
    ticks_missed: int = 0  # ticks the robot held for a late action, since the last robot_timing()
    warned_late: bool = False


class EnvPool:
    """N sim envs plus every compatible connected robot, behind the batched env contract."""

    def __init__(
        self, sim: VectorEnv, server: LinkServer | None = None, loop: asyncio.AbstractEventLoop | None = None,
        weights: dict[str, float] | None = None, step_timeout_s: float = 10.0, seed: int = 0,
        sim_recorder=None, rewards: Callable[[], RobotRewards] = EnvRewards,
        judged: JudgedEpisodes | None = None, frame_decode: str = "auto",
    ) -> None:  # fmt: skip
        self.sim, self.server, self.loop = sim, server, loop
        self.spec: EnvSpec = sim.spec
        self.weights = {"sim": 1.0, "robot": 1.0, **(weights or {})}
        unknown = set(self.weights) - {"sim", "robot"}
        if unknown:
            raise ValueError(f"weights are by source kind ('sim', 'robot'); unknown {sorted(unknown)}")
        # The trainer-side envs may be a mix (sim + world model) with their own sources and weights.
        self._sim_sources = slot_sources(sim)
        self._sim_weights = np.asarray(getattr(sim, "source_weights", np.ones(sim.num_envs)), np.float32)
        self.step_timeout_s = step_timeout_s
        self.sim_recorder = sim_recorder  # a SimEpisodeRecorder, or None
        self.make_rewards = rewards  # one RobotRewards per robot slot (reward.source)
        self.judged = judged  # where the judged steps go to be recorded with the robot's frames
        self._sim_obs: dict[str, Any] | None = None
        self.decoder = make_frame_decoder(frame_decode)  # robots' frames: GPU (nvJPEG) or CPU threads
        self.robot_threads = ThreadPoolExecutor(8, thread_name_prefix="robot-step")
        self.robots: list[_RobotSlot] = []
        self._refused: dict[str, object] = {}  # robot id -> the session refused (each is told once)
        self._robot_seed = seed * 1_000_003 + 500_000  # robots reset from their own seed stream

    # -- what the algorithms see ----------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        return self.sim.num_envs + len(self.robots)

    @property
    def env_id(self) -> str:
        return self.sim.env_id

    @property
    def env_config(self) -> dict[str, Any]:
        return self.sim.env_config

    @property
    def sources(self) -> list[str]:
        return self._sim_sources + [slot.env.source for slot in self.robots]

    @property
    def source_weights(self) -> np.ndarray:
        """``weights['sim']`` scales every trainer-side slot (times its own weight in a mix)."""
        robots = np.full(len(self.robots), self.weights["robot"], np.float32)
        return np.concatenate([self.weights["sim"] * self._sim_weights, robots]).astype(np.float32)

    stack_obs = staticmethod(stack_obs)

    # -- membership -----------------------------------------------------------------------------
    def refresh(self, policy_version: int = 0) -> list[str]:
        """Drop robots that left; add connected robots whose spec fits. Returns the ids added.
        ``policy_version`` (the learner's update count) goes out with every robot chunk from now on."""
        if self.server is None:
            return []
        for slot in self.robots:
            if not slot.env.available and self.judged is not None:
                self.judged.playing(slot.env.robot_id, False)
        self.robots = [slot for slot in self.robots if slot.env.available]
        known = {slot.env.robot_id for slot in self.robots}
        added = []
        for robot_id, session in list(self.server.sessions.items()):
            if robot_id in known or session.state == "disconnected":
                continue
            problem = spec_mismatch(self.spec, session.spec, f"robot {robot_id}")
            if problem:
                if self._refused.get(robot_id) is not session:
                    log.error("not training on robot %s: %s", robot_id, problem)
                    # The agent hears why, instead of holding forever.
                    asyncio.run_coroutine_threadsafe(session.refuse(f"training: {problem}"), self.loop)
                self._refused[robot_id] = session
                continue
            env = RemoteRobotEnv(self.server, self.loop, robot_id, self.decoder, self.step_timeout_s)
            slot = _RobotSlot(env, rewards=self.make_rewards())
            if slot.rewards.source == "env" and not session.capabilities.reward:
                log.warning(
                    "robot %s reports no reward (a real arm): with reward.source=env its episodes train "
                    "on reward 0; set reward.source=classifier or human", robot_id,
                )  # fmt: skip
            self.robots.append(slot)
            if self.judged is not None:
                self.judged.playing(robot_id)
            added.append(robot_id)
            log.info("robot %s joined the pool (slot %d)", robot_id, self.num_envs - 1)
        for slot in self.robots:
            slot.env.policy_version = policy_version
        return added

    # -- the batched contract -------------------------------------------------------------------
    def reset(
        self, seed: int | None = None, seeds: list[int | None] | None = None
    ) -> tuple[dict[str, Any], dict]:
        if seeds is not None and len(seeds) != self.num_envs:
            raise ValueError(f"seeds must have one entry per env ({self.num_envs}), got {len(seeds)}")
        n_sim = self.sim.num_envs
        robot_seeds = [seeds[n_sim + j] if seeds is not None else None for j in range(len(self.robots))]
        futures = [
            self.robot_threads.submit(self._reset_robot, slot, robot_seed)
            for slot, robot_seed in zip(self.robots, robot_seeds)
        ]
        sim_obs, _ = self.sim.reset(seed=seed, seeds=seeds[:n_sim] if seeds is not None else None)
        self._sim_obs = sim_obs
        if self.sim_recorder is not None:
            self.sim_recorder.discard_partial()
        for future in futures:
            future.result()
        return self._stack(sim_obs, [slot.obs for slot in self.robots]), {}

    def step(self, actions: np.ndarray) -> ChunkResult:
        return self.chunk_step(np.asarray(actions)[:, None, :])

    def chunk_step(self, actions: np.ndarray) -> ChunkResult:
        actions = np.asarray(actions)
        n_sim = self.sim.num_envs
        if actions.ndim != 3 or actions.shape[0] != self.num_envs:
            raise ValueError(
                f"actions expected [{self.num_envs}, chunk, {self.spec.action.dim}], got {list(actions.shape)}"
            )
        futures = [
            self.robot_threads.submit(self._robot_chunk, slot, actions[n_sim + j])
            for j, slot in enumerate(self.robots)
        ]
        sim = self.sim.chunk_step(actions[:n_sim])
        if self.sim_recorder is not None and self._sim_obs is not None:
            self.sim_recorder.record(self._sim_obs, actions[:n_sim], sim)
        self._sim_obs = sim.obs
        robots = [future.result() for future in futures]
        sim = replace(sim, executed=sim.executed if sim.executed is not None else np.asarray(actions[:n_sim]))
        return ChunkResult.concatenate([sim, *robots])

    def robot_timing(self) -> dict[str, float]:
        """Per robot, since the last call: the ticks it held for a late action per step it played
        (``source/robot:<id>/missed_ticks_per_step``; 0: every step on its tick, 1: each step cost two).
        The robots step in lockstep with the sim envs, so a pool step (the sims' step, then the batched
        policy) that outlasts a robot's tick costs the robot whole ticks: its real time, halved or worse."""
        metrics = {}
        for slot in self.robots:
            if slot.steps_played:
                late = slot.ticks_missed / slot.steps_played
                metrics[f"source/{slot.env.source}/missed_ticks_per_step"] = late
                if late > 0.5 and not slot.warned_late:
                    slot.warned_late = True
                    log.warning(
                        "robot %s held %.2f ticks per step for late actions: the pool's step (%d sim envs, "
                        "then the policy) outlasts its tick; fewer sim envs (env.num_envs) keeps it on "
                        "its ticks", slot.env.robot_id, late, self.sim.num_envs,
                    )  # fmt: skip
            slot.steps_played = slot.ticks_missed = 0
        return metrics

    # -- robots ---------------------------------------------------------------------------------
    def _reset_robot(self, slot: _RobotSlot, seed: int | None) -> None:
        if slot.episode_id and self.judged is not None:  # the new START ends the running episode
            self.judged.close(slot.env.robot_id, slot.episode_id)
        slot.episode_id = ""
        if seed is None:
            self._robot_seed += 1
            seed = self._robot_seed
        try:
            slot.obs = self._select(slot.env.reset(seed=seed)[0])
            # Known from its first observation: a reset before any step (an iteration's start right
            # after an episode ended) must close this episode too, or its recording waits for judging.
            slot.episode_id = slot.env.episode_id
        except (RobotUnavailable, TimeoutError, asyncio.TimeoutError) as exc:
            log.warning("robot %s could not start an episode (%s); its slot sits out", slot.env.robot_id, exc)
            slot.obs = None
        slot.episode_return, slot.episode_length = 0.0, 0
        slot.rewards.begin()
        slot.last = NOTHING_YET

    def _robot_chunk(self, slot: _RobotSlot, actions: np.ndarray) -> ChunkResult:
        """One robot's chunk as a one-env result (a dead slot plays nothing: every step invalid)."""
        chunk = len(actions)
        row = lambda dtype: np.zeros((1, chunk), dtype)  # noqa: E731
        out = ChunkResult(
            obs=stack_obs([slot.obs if slot.obs is not None else self._blank_obs()]),
            rewards=row(np.float32),
            terminated=row(bool),
            truncated=row(bool),
            success=row(bool),
            valid=row(bool),
            final_obs=[None],
            executed=np.array(actions, np.float32)[None],
            intervened=row(bool),
        )
        if slot.obs is None:  # dead for the rest of this iteration
            return out
        try:
            outcome = slot.env.play_chunk(actions)
        except (TimeoutError, asyncio.TimeoutError):
            outcome = None
        if outcome is not None:
            slot.steps_played += len(outcome.observations)
            slot.ticks_missed += outcome.missed_ticks
        if outcome is None or outcome.aborted:
            log.warning("robot %s: episode aborted mid-chunk; it is not trained on", slot.env.robot_id)
            slot.obs, out.aborted = None, [0]
            return out
        self._judge(slot, outcome, out)
        return out

    def _judge(self, slot: _RobotSlot, outcome, out: ChunkResult) -> None:
        """Fill ``out`` from the played steps, with rewards and success from the slot's reward source;
        the episode ends where the robot ended it or where the source judged it over."""
        judge = slot.rewards
        frames = (
            [self._select(slot.env.decode(o)) for o in outcome.observations] if judge.needs_frames else []
        )
        played, judged_end = len(outcome.observations), False
        for k, observation in enumerate(outcome.observations):
            transition = observation.transition
            slot.last = judge.judge(frames[k] if frames else None, transition)
            out.rewards[0, k], out.success[0, k] = slot.last.reward, slot.last.success
            out.valid[0, k], out.intervened[0, k] = True, transition.intervened
            if len(transition.executed_action) == self.spec.action.dim:
                out.executed[0, k] = transition.executed_action
            if slot.last.ends_episode:  # the source judged the episode over: later steps are not used
                played, judged_end = k + 1, True
                break
        if played:
            last_obs = outcome.observations[played - 1]
            slot.obs = frames[played - 1] if frames else self._select(slot.env.decode(last_obs))
            out.obs = stack_obs([slot.obs])
        if judged_end or outcome.end is not None:
            k = max(played - 1, 0)
            robot_terminated = bool(outcome.observations[k].transition.terminated) if played else False
            if not judged_end:
                slot.last = judge.at_end(outcome.end, slot.last)
                if played:  # a human's label pays, and succeeds, at the end
                    out.rewards[0, k], out.success[0, k] = slot.last.reward, slot.last.success
            out.terminated[0, k] = judged_end or robot_terminated
            out.truncated[0, k] = not out.terminated[0, k]
            out.final_obs = [select_row(out.obs, 0)]
        for k, observation in enumerate(outcome.observations[:played]):
            slot.episode_id = observation.episode_id
            if self.judged is not None:
                self.judged.record(slot.env.robot_id, observation.episode_id, observation.step,
                                   float(out.rewards[0, k]), bool(out.success[0, k]))  # fmt: skip
        slot.episode_return += float(out.rewards.sum())
        slot.episode_length += played
        if judged_end or outcome.end is not None:
            out.finished = [EpisodeSummary(0, slot.episode_return, slot.episode_length, slot.last.success)]
            slot.episodes += 1
            self._reset_robot(slot, None)  # a new START ends the robot's running episode first
            out.obs = stack_obs([slot.obs if slot.obs is not None else self._blank_obs()])

    def _select(self, obs: dict[str, Any]) -> dict[str, Any]:
        """The robot's observation with just the cameras the sim envs have."""
        return {**obs, "images": {name: obs["images"][name] for name in self.spec.camera_names}}

    def _blank_obs(self) -> dict[str, Any]:
        return {
            "state": np.zeros(self.spec.state_dim, np.float32),
            "images": {
                name: np.zeros(self.spec.camera(name).shape, np.uint8) for name in self.spec.camera_names
            },
            "instruction": self.spec.instruction,
        }

    def _stack(self, sim_obs: dict[str, Any], robot_obs: list[dict[str, Any] | None]) -> dict[str, Any]:
        if not robot_obs:
            return sim_obs
        rows = [row if row is not None else self._blank_obs() for row in robot_obs]
        return concat_obs([sim_obs, stack_obs(rows)])

    def close(self) -> None:
        for slot in self.robots:
            if self.judged is not None:  # a running episode keeps what was judged of it
                if slot.episode_id:
                    self.judged.close(slot.env.robot_id, slot.episode_id)
                self.judged.playing(slot.env.robot_id, False)
        self.sim.close()
        self.robot_threads.shutdown(wait=False, cancel_futures=True)
        self.decoder.close()
