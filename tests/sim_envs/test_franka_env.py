import time

import gymnasium as gym
import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import sim_envs
from protos import ContractError, franka, validate_observation
from sim_envs.registry import UnknownEnvError

ENV_IDS = sorted(sim_envs.ENV_IDS)


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("action_mode", ["ee_delta_pose+gripper", "joint_position"])
def test_gymnasium_env_checker_passes(env_id, action_mode):
    env = gym.make(env_id, action_mode=action_mode, render_mode="rgb_array", image_height=64, image_width=64)
    check_env(env.unwrapped, skip_render_check=False)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_observations_follow_the_spec(env_id):
    env = sim_envs.make(env_id)
    obs, info = env.reset(seed=1)
    validate_observation(env.env_spec, obs)
    assert env.env_spec.camera_names == ("front", "wrist")
    assert obs["images"]["front"].shape == (128, 128, 3)
    assert info == {"success": False}
    obs, *_ = env.step(np.zeros(env.env_spec.action.dim, np.float32))
    validate_observation(env.env_spec, obs)
    env.close()


def test_seeded_reset_is_reproducible_and_seeds_differ():
    env = sim_envs.make("rlinf/FrankaPush-v0", cameras=())
    a, _ = env.reset(seed=7)
    b, _ = env.reset(seed=7)
    c, _ = env.reset(seed=8)
    np.testing.assert_array_equal(a["state"], b["state"])
    cube = env.env_spec.state_slices()["cube_pos"]
    assert not np.allclose(a["state"][cube], c["state"][cube])


def test_nan_action_never_reaches_physics():
    env = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=())
    env.reset(seed=0)
    qpos, time_before = env.data.qpos.copy(), env.data.time
    ctrl, mocap = env.data.ctrl.copy(), env.data.mocap_pos.copy()
    action = np.zeros(7, np.float32)
    action[2] = np.nan
    with pytest.raises(ContractError, match=r"action\[2\] \(dz\) is nan"):
        env.step(action)
    assert env.data.time == time_before
    np.testing.assert_array_equal(env.data.qpos, qpos)
    np.testing.assert_array_equal(env.data.ctrl, ctrl)
    np.testing.assert_array_equal(env.data.mocap_pos, mocap)


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (np.zeros(6, np.float32), r"action shape expected \[7\], got \[6\]"),
        (np.array(["x"] * 7), "dtype must be float32"),
        (np.full(7, 2.0, np.float32), r"action\[0\] \(dx\) = 2 is outside \[-1, 1\]"),
    ],
)
def test_bad_actions_are_rejected_with_the_field_named(action, message):
    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=())
    env.reset(seed=0)
    with pytest.raises(ContractError, match=message):
        env.step(action)


def test_unknown_env_id_and_config_key_are_one_line_errors():
    with pytest.raises(UnknownEnvError, match="unknown env id 'rlinf/FrankaFly-v0'; known:"):
        sim_envs.make("rlinf/FrankaFly-v0")
    with pytest.raises(ValueError, match="unknown key 'camras' in env config"):
        sim_envs.make("rlinf/FrankaReach-v0", camras=())
    with pytest.raises(ValueError, match="unknown camera 'top'"):
        sim_envs.make("rlinf/FrankaReach-v0", cameras=("top",))
    with pytest.raises(ValueError, match="unknown key 'gravity' in randomization"):
        sim_envs.make("rlinf/FrankaReach-v0", randomization={"gravity": (1, 2)})
    with pytest.raises(ValueError, match="must divide the physics rate"):
        sim_envs.make("rlinf/FrankaReach-v0", control_hz=7.0)


def test_camera_images_change_when_the_arm_moves():
    env = sim_envs.make("rlinf/FrankaReach-v0")
    obs0, _ = env.reset(seed=0)
    action = np.zeros(7, np.float32)
    action[1] = 1.0  # sweep sideways
    for _ in range(4):
        obs, *_ = env.step(action)

    def changed_fraction(a, b):
        return (np.abs(a.astype(int) - b.astype(int)).max(axis=-1) > 30).mean()

    for cam in ("front", "wrist"):
        changed = changed_fraction(obs["images"][cam], obs0["images"][cam])
        assert changed > 0.01, f"{cam}: only {changed:.1%} of pixels changed"
    # And they hold still when nothing moves.
    for _ in range(3):
        still, *_ = env.step(np.zeros(7, np.float32))
    again, *_ = env.step(np.zeros(7, np.float32))
    for cam in ("front", "wrist"):
        assert changed_fraction(still["images"][cam], again["images"][cam]) < 0.005


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_ee_delta_action_moves_the_tcp_along_the_commanded_axis(axis):
    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=())
    env.reset(seed=0)
    start = env.scene.tcp_pos
    action = np.zeros(7, np.float32)
    action[axis] = -1.0 if axis == 2 else 1.0
    for _ in range(3):
        env.step(action)
    for _ in range(3):  # let the impedance controller settle on the final target
        env.step(np.zeros(7, np.float32))
    moved = env.scene.tcp_pos - start
    expected = 3 * env.cfg.max_translation_m * action[axis]
    assert moved[axis] == pytest.approx(expected, abs=0.015)
    others = [i for i in range(3) if i != axis]
    assert np.abs(moved[others]).max() < 0.01


def test_workspace_box_keeps_the_fingers_above_the_table():
    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=())
    env.reset(seed=0)
    down = np.array([0, 0, -1, 0, 0, 0, 1], np.float32)
    for _ in range(20):
        env.step(down)
    assert env.scene.tcp_pos[2] > 0.02


def test_joint_position_mode_tracks_joint_targets():
    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=(), action_mode="joint_position")
    env.reset(seed=0)
    target = np.array([0.3, -0.5, 0.1, -2.0, 0.1, 1.6, 0.5, 1.0], np.float32)
    for _ in range(10):
        env.step(target)
    np.testing.assert_allclose(env.scene.arm_qpos, target[:7], atol=0.02)


def test_reach_rewards_success_and_sparse_mode():
    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=(), terminate_on_success=True)
    obs, _ = env.reset(seed=3)
    goal_rel = env.env_spec.state_slices()["goal_rel_tcp"]
    rewards, success, terminated = [], False, False
    for _ in range(env.max_episode_steps):
        delta = obs["state"][goal_rel]
        action = np.zeros(7, np.float32)
        action[:3] = np.clip(delta / env.cfg.max_translation_m, -1, 1)
        obs, reward, terminated, _truncated, info = env.step(action)
        rewards.append(reward)
        if terminated:
            success = info["success"]
            break
    assert success and terminated
    assert rewards[-1] == 1.0
    assert rewards[0] < rewards[-2] < 1.0  # dense reward rises while approaching

    sparse = sim_envs.make("rlinf/FrankaReach-v0", cameras=(), reward_type="sparse")
    sparse.reset(seed=3)
    _, reward, *_ = sparse.step(np.zeros(7, np.float32))
    assert reward == 0.0


def test_episode_truncates_at_max_steps():
    env = sim_envs.make("rlinf/FrankaPush-v0", cameras=(), max_episode_steps=4)
    env.reset(seed=0)
    flags = [env.step(np.zeros(7, np.float32))[3] for _ in range(4)]
    assert flags == [False, False, False, True]
    assert env.env_spec.max_episode_steps == 4


def test_push_success_when_cube_reaches_goal():
    env = sim_envs.make("rlinf/FrankaPush-v0", cameras=())
    env.reset(seed=0)
    result = env.task.evaluate(env.scene)
    assert not result.success
    env.scene.place_cube(env.scene.goal_pos, yaw=0.0)
    mujoco.mj_forward(env.model, env.data)
    assert env.task.evaluate(env.scene).success


def test_render_returns_front_camera_frame():
    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=(), render_mode="rgb_array", render_size=96)
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (96, 96, 3) and frame.dtype == np.uint8 and frame.std() > 5


def test_a_physics_blow_up_ends_the_episode_with_a_flag():
    env = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=())
    env.reset(seed=0)
    cube_dof = env.model.joint("cube_joint").dofadr[0]
    env.data.qvel[cube_dof] = 1e20  # MuJoCo detects this and resets its state
    _, reward, terminated, truncated, info = env.step(np.zeros(7, np.float32))
    assert truncated and not terminated and reward == 0.0
    assert info["physics_unstable"] is True
    env.reset(seed=0)
    *_, info = env.step(np.zeros(7, np.float32))
    assert "physics_unstable" not in info


def test_proprio_only_state_hides_the_task_state():
    env = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=("front",), privileged_state=False)
    obs, _ = env.reset(seed=0)
    names = [f.name for f in env.env_spec.state_fields]
    assert names == ["joint_pos", "joint_vel", "tcp_pos", "tcp_quat", "gripper_width"]
    assert obs["state"].shape == (22,)
    validate_observation(env.env_spec, obs)


def test_a_real_time_env_keeps_its_control_period_and_arms_side_by_side_share_it():
    envs = [
        sim_envs.make("rlinf/FrankaReach-v0", cameras=[], control_hz=10.0, real_time=True) for _ in range(2)
    ]
    for env in envs:
        env.reset(seed=0)
    hold = np.zeros(envs[0].action_space.shape, np.float32)
    start = time.monotonic()
    for _ in range(6):
        for env in envs:  # stepped one after the other, like a vector env's inline backend
            env.step(hold)
    elapsed = time.monotonic() - start
    assert elapsed >= 0.6 - 0.01  # six control periods of 100 ms: paced like a real arm
    assert elapsed < 1.2  # not twelve: each env keeps its own deadline, as two arms would


def test_gym_make_builds_a_state_only_env():
    import gymnasium as gym

    env = gym.make("rlinf/FrankaReach-v0", cameras=())
    obs, _ = env.reset(seed=0)
    assert obs["images"] == {} and obs["state"].shape == env.observation_space["state"].shape
    obs, *_ = env.step(env.action_space.sample())
    assert obs["images"] == {}
    env.close()


def test_with_the_robots_limits_the_sim_moves_its_target_as_the_agents_safety_filter_would():
    """A sim that applies the agent's limits (steps, lead, orientation bound) commands, for the same
    action, the target the agent's safety filter lets through on the robot; without them the sim's
    target runs ahead and turns past the bound."""
    from protos.pose_math import matrix_to_rotvec, quat_to_matrix, rotvec_to_matrix
    from robot_agent.safety import ArmScaling, SafetyConfig, SafetyFilter, TcpPose

    limits = SafetyConfig()  # the agent's defaults: 3 cm steps, 3 cm lead, 0.2 rad, 1.6 rad from the start
    limited = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=(), **limits.sim_limits())
    free = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=())
    scale = limited.unwrapped.cfg
    safety = SafetyFilter(
        limited.env_spec, (ArmScaling(scale.max_translation_m, scale.max_rotation_rad),), limits, franka.PANDA
    )
    action = np.array([1.0, 1.0, -1.0, 0, 0, 1.0, 1.0], np.float32)  # 8.7 cm a step, and 0.3 rad about z
    state, _ = limited.reset(seed=0)
    free.reset(seed=0)
    start = quat_to_matrix(limited.unwrapped.scene.tcp_quat)
    clipped = set()
    for _ in range(12):
        base_pos, base_quat = (x.copy() for x in limited.unwrapped.commanded_tcp_pose())
        safe, events = safety.limit(action, state["state"], None, (TcpPose(base_pos, base_quat),))
        clipped |= set(events)
        state, *_ = limited.step(action)
        position, quat = limited.unwrapped.commanded_tcp_pose()
        np.testing.assert_allclose(
            position, base_pos + safe[:3].astype(np.float64) * scale.max_translation_m, atol=1e-5
        )
        expected = rotvec_to_matrix(safe[3:6].astype(np.float64) * scale.max_rotation_rad) @ quat_to_matrix(
            base_quat
        )
        np.testing.assert_allclose(quat_to_matrix(quat), expected, atol=1e-5)
        free.step(action)
    # The arm lags: the lead limits, not only the step limits, were at work, and the bound on turning.
    assert {"clipped:lead", "clipped:orientation"} <= clipped, clipped

    def lead(env):
        return np.linalg.norm(env.unwrapped._command.arm_target - env.unwrapped.scene.tcp_pos)

    def turned(env):
        return np.linalg.norm(
            matrix_to_rotvec(quat_to_matrix(env.unwrapped.commanded_tcp_pose()[1]) @ start.T)
        )

    assert lead(limited) <= limits.max_target_lead_m + 1e-6 < lead(free)
    assert turned(limited) <= limits.max_orientation_change_rad + 1e-6 < turned(free)
