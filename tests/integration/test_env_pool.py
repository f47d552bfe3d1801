"""The env pool: sim envs and remote robots behind one vector env, robots joining and dropping live."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

import sim_envs
from protos import validate_observation
from tests.integration.link_harness import start_agent, start_server, wait_until
from trainer.server.env_pool import EnvPool
from trainer.server.frame_decoder import CpuFrameDecoder
from trainer.server.judged_episodes import JudgedEpisodes
from trainer.server.remote_env import RemoteRobotEnv

pytestmark = pytest.mark.slow
TWIN = {"max_episode_steps": 8, "cameras": ["front", "wrist"], "image_size": 64}
SIM = {"cameras": ["front", "wrist"], "image_height": 64, "image_width": 64, "privileged_state": False}


def random_chunks(pool: EnvPool, rng, chunk: int = 2) -> np.ndarray:
    return rng.uniform(-0.3, 0.3, (pool.num_envs, chunk, pool.spec.action.dim)).astype(np.float32)


def test_a_remote_robot_obeys_the_env_contract(tmp_path):
    server = start_server()
    agent = start_agent(server.server.port, tmp_path, robot_id="twin", driver=TWIN)
    try:
        wait_until(lambda: "twin" in server.server.sessions, what="the robot")
        env = RemoteRobotEnv(server.server, server.loop, "twin", CpuFrameDecoder(2))
        obs, info = env.reset(seed=1)
        validate_observation(env.spec, obs)
        assert info["source"] == "robot:twin"
        outcome = env.play_chunk(np.tile([0.2, 0, 0, 0, 0, 0, 1], (3, 1)).astype(np.float32))
        assert [o.step for o in outcome.observations] == [1, 2, 3]  # one observation per executed tick
        assert not outcome.done
        rewards, done = [], False
        for _ in range(5):
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
    sim = sim_envs.make_vector("rlinf/FrankaReach-v0", 2, backend="inline", **SIM)
    pool = EnvPool(sim, server.server, server.loop, weights={"robot": 4.0})
    rng = np.random.default_rng(0)
    assert pool.refresh() == [] and pool.num_envs == 2  # no robot yet: sim only
    first = start_agent(server.server.port, tmp_path / "a", robot_id="twin-a", driver=TWIN)
    second = None
    try:
        wait_until(lambda: "twin-a" in server.server.sessions, what="a robot")
        assert pool.refresh(policy_version=5) == ["twin-a"]  # joins between iterations
        assert pool.sources == ["sim:rlinf/FrankaReach-v0"] * 2 + ["robot:twin-a"]
        assert list(pool.source_weights) == [1.0, 1.0, 4.0]
        obs, _ = pool.reset(seed=3)
        assert obs["state"].shape == (3, pool.spec.state_dim)
        assert obs["images"]["front"].shape == (3, 64, 64, 3) and obs["images"]["front"][2].any()
        finished = []
        for _ in range(6):  # 12 ticks: the robot's 8-step episode ends and it auto-resets
            result = pool.chunk_step(random_chunks(pool, rng))
            assert result.valid[2].any() and not result.aborted
            finished += [e for e in result.finished if e.env_index == 2]
        assert [e.length for e in finished] == [8]
        assert result.rewards[2].any()  # the twin's dense reward comes through
        # The robot ran chunks of the learner's current version, and said so step by step.
        assert server.server.sessions["twin-a"].stats.policy_version == 5

        # A second robot waits for the next refresh; the first drops mid-episode.
        second = start_agent(server.server.port, tmp_path / "b", robot_id="twin-b", driver=TWIN)
        wait_until(lambda: "twin-b" in server.server.sessions, what="a second robot")
        assert pool.num_envs == 3
        first.stop()
        wait_until(lambda: server.server.sessions["twin-a"].state == "disconnected", what="the drop")
        result = pool.chunk_step(random_chunks(pool, rng))
        assert result.aborted == [2] and not result.valid[2].any()  # the cut episode is marked
        for _ in range(3):
            result = pool.chunk_step(random_chunks(pool, rng))  # no crash; the sims go on
            assert not result.valid[2].any() and result.valid[:2].all(axis=1).all()
        assert pool.refresh() == ["twin-b"]  # next iteration: the dropped robot is out, the new one in
        assert pool.sources[2:] == ["robot:twin-b"]
        pool.reset(seed=4)
        result = pool.chunk_step(random_chunks(pool, rng))
        assert result.valid[2].all()
    finally:
        first.stop()
        if second is not None:
            second.stop()
        pool.close()
        server.stop()


def test_a_robot_whose_spec_does_not_fit_is_left_out(tmp_path, caplog):
    server = start_server()
    sim = sim_envs.make_vector(
        "rlinf/FrankaReach-v0", 1, backend="inline", **{**SIM, "action_rotation": False}
    )
    pool = EnvPool(sim, server.server, server.loop)
    agent = start_agent(server.server.port, tmp_path, robot_id="twin", driver=TWIN)
    try:
        wait_until(lambda: "twin" in server.server.sessions, what="the robot")
        assert pool.refresh() == [] and pool.num_envs == 1
        assert "expected action dim 4, robot twin has 7" in caplog.text
    finally:
        agent.stop()
        pool.close()
        server.stop()


def test_the_robots_weight_changes_how_far_its_transitions_move_a_ppo_update(tmp_path):
    import copy

    import torch

    from policies import make_policy
    from trainer.algorithms.common import collect_on_policy
    from trainer.algorithms.ppo import PPO, PPOConfig

    server = start_server()
    sim = sim_envs.make_vector("rlinf/FrankaReach-v0", 1, backend="inline", cameras=[], privileged_state=False,
                               max_episode_steps=8)  # fmt: skip
    pool = EnvPool(sim, server.server, server.loop, weights={"robot": 3.0})
    agent = start_agent(server.server.port, tmp_path, robot_id="twin", driver={**TWIN, "cameras": []})
    try:
        wait_until(lambda: "twin" in server.server.sessions, what="the robot")
        assert pool.refresh() == ["twin"]
        torch.manual_seed(0)
        policy = make_policy(pool.spec, {"hidden_sizes": [32]})
        batch = collect_on_policy(pool, policy, seed=0, num_steps=8, cameras=[])
    finally:
        agent.stop()
        server.stop()
    weights = batch.weights.numpy()
    assert (weights[:, 0] == 1.0).all() and (weights[:, 1] == 3.0).all()  # the pool's weights, per source

    def update(weight: float, robot_reward_scale: float = 1.0) -> torch.Tensor:
        """How far one PPO epoch moves the parameters, with the robot's column weighted ``weight``."""
        moved = copy.deepcopy(policy)
        tampered = copy.copy(batch)
        tampered.weights = batch.weights.clone()
        tampered.weights[:, 1] = weight
        tampered.rewards = batch.rewards.clone()
        tampered.rewards[:, 1] *= robot_reward_scale
        torch.manual_seed(1)  # the same minibatch order every time
        PPO(moved, PPOConfig(update_epochs=1, num_minibatches=1)).update(tampered)
        return torch.cat([(a - b).flatten() for a, b in zip(moved.parameters(), policy.parameters())])

    assert not torch.allclose(update(0.0), update(1.0)) and not torch.allclose(update(1.0), update(3.0))
    # Weight 0: what the robot's transitions say (here, its rewards) does not move the update at all.
    assert torch.allclose(update(0.0), update(0.0, robot_reward_scale=-10.0), atol=1e-6)
    assert not torch.allclose(update(1.0), update(1.0, robot_reward_scale=-10.0), atol=1e-6)


def test_the_pool_mixes_a_sim_a_world_model_and_robots(tmp_path):
    """Simulated and imagined envs (``env.world_model_envs``) and a twin in one pool, each source with
    its own weight; every kind of episode ends and is listed under its own slot."""
    from trainer.configs.schema import EnvConfig, TrainConfig
    from trainer.expert_demos import DemoConfig, record_expert_demos
    from trainer.runner import make_sim_envs
    from trainer.world_model_training import WorldModelTrainConfig, train_world_model

    state_env = {"cameras": [], "privileged_state": True, "action_rotation": False, "max_episode_steps": 8}
    demos = record_expert_demos(DemoConfig("rlinf/FrankaReach-v0", 3, str(tmp_path / "demos"), seed=0,
                                           only_successful=False, env_kwargs=state_env), progress=False)  # fmt: skip
    spec = sim_envs.make("rlinf/FrankaReach-v0", **state_env).env_spec
    train_world_model(WorldModelTrainConfig(dataset=str(demos.root), updates=20, hidden=32, ensemble=2), spec,
                      tmp_path / "wm")  # fmt: skip
    env = EnvConfig(id="rlinf/FrankaReach-v0", num_envs=1, backend="inline", kwargs=state_env,
                    world_model_envs=2, world_model_weight=0.5,
                    world_model={"checkpoint": str(tmp_path / "wm" / "world_model"), "max_episode_steps": 8})  # fmt: skip
    trainer_side = make_sim_envs(TrainConfig(env=env))
    server = start_server()
    pool = EnvPool(trainer_side, server.server, server.loop, weights={"robot": 3.0, "sim": 2.0})
    twin = {"task": "reach", "cameras": [], "privileged_state": True, "action_rotation": False,
            "max_episode_steps": 8}  # fmt: skip
    agent = start_agent(server.server.port, tmp_path / "agent", robot_id="twin", driver=twin)
    try:
        wait_until(lambda: "twin" in server.server.sessions, what="the robot")
        assert pool.refresh() == ["twin"]
        assert pool.sources == [
            "sim:rlinf/FrankaReach-v0",
            *["world_model:rlinf/WorldModel-v0"] * 2,
            "robot:twin",
        ]
        assert list(pool.source_weights) == [2.0, 1.0, 1.0, 3.0]  # sim weight x the mix's own
        pool.reset(seed=0)
        rng = np.random.default_rng(0)
        ended = set()
        for _ in range(5):  # 10 ticks: every 8-step episode, simulated, imagined or played, ends once
            result = pool.chunk_step(random_chunks(pool, rng))
            assert result.valid[:, 0].all() and result.rewards[3].any()
            ended |= {e.env_index for e in result.finished}
        assert ended == {0, 1, 2, 3}
    finally:
        agent.stop()
        server.stop()
        pool.close()


def test_a_reset_before_any_step_closes_the_episode_it_ends_for_the_recorder(tmp_path):
    # An iteration's start resets every env, also a robot whose episode has just started (after
    # the last one ended): that episode must be closed for the recorder, which would otherwise wait
    # for the pool to judge it, holding up the robot's stream behind the store (10 s in a run).
    server = start_server()
    sim = sim_envs.make_vector("rlinf/FrankaReach-v0", 1, backend="inline", **SIM)
    judged = JudgedEpisodes("env", wait_s=0.0)  # take() answers at once: closed ({}) or not (None)
    pool = EnvPool(sim, server.server, server.loop, judged=judged)
    agent = start_agent(server.server.port, tmp_path, robot_id="twin", driver=TWIN)
    try:
        wait_until(lambda: "twin" in server.server.sessions, what="the robot")
        assert pool.refresh() == ["twin"]
        pool.reset(seed=1)
        started = pool.robots[0].env.episode_id
        assert started
        pool.reset(seed=2)  # no step in between
        assert pool.robots[0].env.episode_id != started
        assert judged.take("twin", started) == {}  # closed, nothing judged: the agent's values stand
    finally:
        agent.stop()
        pool.close()
        server.stop()


class SlowSim:
    """A sim vector env whose step outlasts the robot's 100 ms tick (as 16 camera sims do on 2 cores)."""

    def __init__(self, venv, step_s: float) -> None:
        self.venv, self.step_s = venv, step_s

    def __getattr__(self, name):
        return getattr(self.venv, name)

    def chunk_step(self, actions):
        time.sleep(self.step_s)
        return self.venv.chunk_step(actions)


def test_a_pool_step_that_outlasts_the_robots_tick_is_counted_in_missed_ticks(tmp_path, caplog):
    server = start_server()
    agent = start_agent(
        server.server.port, tmp_path, robot_id="twin", driver={**TWIN, "max_episode_steps": 100}
    )
    fast = sim_envs.make_vector("rlinf/FrankaReach-v0", 1, backend="inline", **SIM)
    slow = sim_envs.make_vector("rlinf/FrankaReach-v0", 1, backend="inline", **SIM)
    pools = {
        "fast": EnvPool(fast, server.server, server.loop),
        "slow": EnvPool(SlowSim(slow, 0.25), server.server, server.loop),
    }
    rng = np.random.default_rng(0)
    late = {}
    try:
        wait_until(lambda: "twin" in server.server.sessions, what="the robot")
        for name, pool in pools.items():  # one after the other, on the same robot
            assert pool.refresh() == ["twin"]
            pool.reset(seed=1)
            with caplog.at_level(logging.WARNING, logger="trainer.server.env_pool"):
                for _ in range(12):
                    assert pool.chunk_step(random_chunks(pool, rng, chunk=1)).valid[1].all()
                late[name] = pool.robot_timing()["source/robot:twin/missed_ticks_per_step"]
            assert pool.robot_timing() == {}  # counted afresh after each call
            pool.robots = []  # hand the robot to the next pool
    finally:
        agent.stop()
        for pool in pools.values():
            pool.close()
        server.stop()
    # 250 ms of sim per step: the robot's 100 ms ticks pass while it waits, at least one per step
    assert late["slow"] >= 1.0 and late["fast"] < 0.5, late
    warnings = [r.getMessage() for r in caplog.records if "held" in r.getMessage()]
    assert len(warnings) == 1 and "robot twin held" in warnings[0] and "env.num_envs" in warnings[0]


def test_a_robot_that_does_not_fit_the_pool_is_told_why_and_stops(tmp_path):
    from robot_agent.link import LinkRefused

    server = start_server()
    sim = sim_envs.make_vector("rlinf/FrankaReach-v0", 1, backend="inline", **SIM)
    pool = EnvPool(sim, server.server, server.loop)
    misfit = start_agent(
        server.server.port, tmp_path, robot_id="one-camera", driver={**TWIN, "cameras": ["front"]}
    )
    try:
        wait_until(lambda: "one-camera" in server.server.sessions, what="the robot")
        assert pool.refresh() == [] and pool.num_envs == 1
        misfit.join(30)
        assert not misfit.is_alive(), "the robot kept holding, never told why"
        assert isinstance(misfit.error, LinkRefused), misfit.error
        assert "FAILED_PRECONDITION: training: robot one-camera lacks cameras ['wrist']" in str(misfit.error)
    finally:
        misfit.stop()
        pool.close()
        server.stop()
