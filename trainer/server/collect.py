"""``collect`` mode: each connected robot runs episodes back to back under a simple policy (random or
hold, for teleoperated demonstrations), every one recorded."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterator

import numpy as np

from protos import robot_link_pb2 as pb
from trainer.server.config import ServeConfig
from trainer.server.episode_runner import run_episode
from trainer.server.session import RobotSession, RobotUnavailable

log = logging.getLogger(__name__)


def collect_policy(config: ServeConfig, dim: int, seed: int):
    rng = np.random.default_rng(seed)
    scale = config.collect.action_scale

    def policy(obs: pb.Observation) -> np.ndarray:
        if config.collect.policy == "hold":
            action = np.zeros(dim, np.float32)
            action[-1] = 1.0
        else:
            action = rng.uniform(-scale, scale, dim).astype(np.float32)
            action[-1] = 1.0 if rng.random() < 0.5 else -1.0
        return action[None]

    return policy


def episode_seeds(config: ServeConfig) -> Iterator[int]:
    """One server-wide sequence from ``collect.seed``: no two episodes, on any robots, share a seed (a
    per-robot count would give every robot the same resets and random actions)."""
    return itertools.count(config.collect.seed)


async def collect(
    session: RobotSession, config: ServeConfig, stop: asyncio.Event, seeds: Iterator[int]
) -> None:
    """Episodes back to back on one robot, until it leaves, the quota is met, or the server stops.
    Each episode's seed (its reset and random actions) is the next of ``seeds``."""
    episode = 0
    while not stop.is_set():
        if config.collect.episodes_per_robot and episode >= config.collect.episodes_per_robot:
            log.info("robot %s: %d episodes collected", session.robot_id, episode)
            return
        seed = next(seeds)
        try:
            end = await run_episode(session, collect_policy(config, session.spec.action.dim, seed), seed=seed)
        except (RobotUnavailable, asyncio.TimeoutError):
            return
        if end.robot_left:
            return
        episode += 1
