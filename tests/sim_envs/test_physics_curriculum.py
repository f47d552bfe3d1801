"""The success-gated physics curriculum: each env earns its way from the nominal sim to the
identified physics one successful episode at a time."""

import json

import numpy as np
import pytest

from sim_envs.franka_env import FrankaEnv
from sim_envs.physics import PhysicsParams, physics_between
from sim_envs.scripted import play_expert

IDENTIFIED = {"actuator_gain_scale": 0.6, "control_latency_ms": 40.0, "object_position_bias_x_m": 0.02}


@pytest.fixture
def physics_file(tmp_path):
    path = tmp_path / "physics.json"
    path.write_text(json.dumps({"format": "rlinf-physics-v1", "params": IDENTIFIED}))
    return str(path)


def observed_offset(env: FrankaEnv, obs) -> np.ndarray:
    cube = obs["state"][env.privileged_spec().state_slices()["cube_pos"]]
    return cube - env.scene.cube_pos


def play_failure(env: FrankaEnv, seed: int) -> None:
    env.reset(seed=seed)
    for _ in range(env.max_episode_steps):
        env.step(np.zeros(env.action_space.shape, np.float32))  # the arm holds still: no lift


def test_each_success_moves_the_env_a_step_toward_the_identified_physics(physics_file):
    env = FrankaEnv(task="pick_lift", cameras=(), privileged_state=True, physics_file=physics_file,
                    physics_curriculum_successes=2)  # fmt: skip
    nominal_gain = env.model.actuator_gainprm[:, 0].copy()
    obs, _ = env.reset(seed=0)
    assert env.physics == PhysicsParams() and env._latency_substeps == 0
    np.testing.assert_allclose(observed_offset(env, obs), 0.0, atol=1e-6)

    play_failure(env, seed=1)  # a failed episode earns nothing
    obs, _ = env.reset(seed=2)
    assert env.curriculum_successes == 0 and env.physics == PhysicsParams()

    assert play_expert(env, seed=3).success
    obs, _ = env.reset(seed=4)  # halfway
    assert env.physics.actuator_gain_scale == pytest.approx(0.8)
    assert env._latency_substeps == 4  # 20 ms at the 5 ms physics step
    np.testing.assert_allclose(observed_offset(env, obs), [0.01, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(env.model.actuator_gainprm[:7, 0], nominal_gain[:7] * 0.8)

    assert play_expert(env, seed=5).success
    obs, _ = env.reset(seed=6)  # there: the identified physics, and no further
    assert env.physics == PhysicsParams(**IDENTIFIED) == env.target_physics
    assert env._latency_substeps == 8
    np.testing.assert_allclose(observed_offset(env, obs), [0.02, 0.0, 0.0], atol=1e-6)
    assert play_expert(env, seed=7).success
    env.reset(seed=8)
    assert env.physics == PhysicsParams(**IDENTIFIED)


def test_without_the_curriculum_the_identified_physics_hold_from_the_first_episode(physics_file):
    env = FrankaEnv(task="pick_lift", cameras=(), privileged_state=True, physics_file=physics_file)
    obs, _ = env.reset(seed=0)
    assert env.physics == PhysicsParams(**IDENTIFIED) and env._latency_substeps == 8
    np.testing.assert_allclose(observed_offset(env, obs), [0.02, 0.0, 0.0], atol=1e-6)


def test_physics_between_interpolates_each_parameter_and_clamps_the_fraction():
    end = PhysicsParams(**IDENTIFIED)
    assert physics_between(PhysicsParams(), end, 0.25).control_latency_ms == pytest.approx(10.0)
    assert physics_between(PhysicsParams(), end, 0.25).actuator_gain_scale == pytest.approx(0.9)
    assert physics_between(PhysicsParams(), end, 7.0) == end
    assert physics_between(PhysicsParams(), end, -1.0) == PhysicsParams()


def test_a_negative_curriculum_is_one_line():
    with pytest.raises(ValueError, match="physics_curriculum_successes must be >= 0"):
        FrankaEnv(task="pick_lift", cameras=(), physics_curriculum_successes=-1)
