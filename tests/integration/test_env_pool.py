"""The env pool: sim envs and remote robots behind one contract, robots joining and dropping live."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import sim_envs
from protos import validate_observation
from tests.integration.link_harness import start_agent, start_server, wait_until
from trainer.server.remote_env import EnvPool, RemoteRobotEnv
from trainer.server.session import RobotUnavailable

pytestmark = pytest.mark.slow
TWIN = {"max_episode_steps": 8, "cameras": ["front", "wrist"], "image_size": 64}


def actions(pool: EnvPool, rng) -> list[np.ndarray]:
    return [rng.uniform(-0.3, 0.3, env.unwrapped.env_spec.action.dim if not isinstance(env, RemoteRobotEnv)
                        else env.spec.action.dim).astype(np.float32) for env in pool.envs]  # fmt: skip


def test_a_remote_robot_obeys_the_env_contract(tmp_path):
    server = start_server()
    agent = start_agent(server.server.port, tmp_path, robot_id="twin", driver=TWIN)
    try:
        wait_until(lambda: "twin" in server.server.sessions, what="the robot")
        env = RemoteRobotEnv(server.server, server.loop, "twin", ThreadPoolExecutor(2))
        obs, info = env.reset(seed=1)
        validate_observation(env.spec, obs)
        assert info["source"] == "robot:twin"
        rewards, done = [], False
        for _ in range(8):
            obs, reward, terminated, truncated, info = env.step(np.array([0.2, 0, 0, 0, 0, 0, 1], np.float32))
            validate_observation(env.spec, obs)
            rewards.append(reward)
            done = terminated or truncated
        assert done and not info["aborted"]  # the twin's 8-step horizon
        assert len(set(rewards)) > 1  # dense rewards from the twin's physics
        with pytest.raises(Exception, match="action"):
            env.step(np.full(7, np.nan, np.float32))
    finally:
        agent.stop()
        server.stop()


def test_the_pool_mixes_sim_and_robots_tags_sources_and_survives_a_drop(tmp_path):
    server = start_server()
    sims = [sim_envs.make("rlinf/FrankaReach-v0", cameras=("front", "wrist"), image_height=64, image_width=64,
                          privileged_state=False) for _ in range(2)]  # fmt: skip
    pool = EnvPool(sims, server.server, server.loop, weights={"robot": 4.0})
    rng = np.random.default_rng(0)
    pool.reset()
    assert pool.sources == ["sim:rlinf/FrankaReach-v0"] * 2  # no robot yet: sim only
    first = start_agent(server.server.port, tmp_path / "a", robot_id="twin-a", driver=TWIN)
    try:
        wait_until(lambda: "twin-a" in server.server.sessions, what="a robot")
        step = pool.step(actions(pool, rng))  # the robot joins this step
        assert step.sources[-1] == "robot:twin-a" and step.infos[-1].get("skipped")
        for _ in range(10):
            step = pool.step(actions(pool, rng))
        assert list(step.weights) == [1.0, 1.0, 4.0]
        assert all(info["source"] == source for info, source in zip(step.infos, step.sources))
        # A second robot joins, then the first drops mid-episode.
        second = start_agent(server.server.port, tmp_path / "b", robot_id="twin-b", driver=TWIN)
        wait_until(lambda: "twin-b" in server.server.sessions, what="a second robot")
        pool.step(actions(pool, rng))
        assert pool.sources[-1] == "robot:twin-b"
        first.stop()
        wait_until(lambda: server.server.sessions["twin-a"].state == "disconnected", what="the drop")
        step = pool.step(actions(pool, rng))
        assert step.infos[2]["aborted"] and step.truncated[2]  # the cut episode is marked, not trained on
        for _ in range(5):
            step = pool.step(actions(pool, rng))  # no crash; sim and the other robot go on
        assert step.infos[2].get("skipped") and not step.infos[3].get("skipped")
        with pytest.raises(RobotUnavailable):
            pool.envs[2].reset()
        second.stop()
    finally:
        first.stop()
        pool.close()
        server.stop()
