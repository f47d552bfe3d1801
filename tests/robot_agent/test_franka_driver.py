"""The franka driver's logic through the pylibfranka seam: smooth 1 kHz setpoints, gripper, homing, e-stop."""

import time

import numpy as np
import pytest

from robot_agent.drivers import DriverError
from robot_agent.drivers.franka import FrankaConfig, FrankaDriver, SetpointFilter
from robot_agent.drivers.pose_math import (
    matrix_to_quat,
    matrix_to_rotvec,
    pose_from_column_major,
    rotvec_to_matrix,
)
from tests.integration.link_harness import wait_until
from tests.robot_agent.fake_pylibfranka import FakeArm, FakeRobot, make_fake_pylibfranka


@pytest.fixture
def arm_and_driver():
    arm = FakeArm()
    plf = make_fake_pylibfranka(arm)
    driver = FrankaDriver(FrankaConfig(host="10.0.0.2", home_duration_s=0.2), plf=plf)
    yield arm, plf, driver
    driver.close()


def test_pose_math_round_trips():
    rng = np.random.default_rng(0)
    for _ in range(20):
        rotvec = rng.normal(size=3)
        rotvec *= min(1.0, 3.0 / np.linalg.norm(rotvec))
        np.testing.assert_allclose(matrix_to_rotvec(rotvec_to_matrix(rotvec)), rotvec, atol=1e-9)
    np.testing.assert_allclose(matrix_to_quat(rotvec_to_matrix([np.pi, 0, 0])), [0, 1, 0, 0], atol=1e-9)


def test_setpoint_filter_limits_speed_acceleration_and_jerk_and_converges():
    cfg = FrankaConfig(max_speed_mps=0.2, max_accel_mps2=1.0, max_jerk_mps3=100.0)
    start = np.array([0.3, 0.0, 0.5])
    filt = SetpointFilter(cfg, start, np.eye(3))
    target = start + np.array([0.1, 0.0, 0.0])
    positions, dt = [start], 0.001
    for _ in range(3000):
        filt.step(dt, target, rotvec_to_matrix([0, 0, 0.3]))
        positions.append(filt.position.copy())
    velocity = np.diff(positions, axis=0) / dt
    acceleration = np.diff(velocity, axis=0) / dt
    jerk = np.linalg.norm(np.diff(acceleration, axis=0), axis=1) / dt
    assert np.linalg.norm(velocity, axis=1).max() <= 0.2 * 1.05
    assert np.linalg.norm(acceleration, axis=1).max() <= 1.0 + 1e-6
    assert jerk.max() <= 100.0 + 1e-3
    assert max(p[0] for p in positions) < target[0] + 0.005  # no big overshoot
    np.testing.assert_allclose(filt.position, target, atol=1e-4)
    np.testing.assert_allclose(matrix_to_rotvec(filt.rotation), [0, 0, 0.3], atol=1e-4)


def test_observe_reports_the_sim_twin_state_layout(arm_and_driver):
    _, _, driver = arm_and_driver
    obs = driver.observe()
    slices = driver.spec.state_slices()
    assert obs.state.shape == (driver.spec.state_dim,) == (22,)
    np.testing.assert_allclose(obs.state[slices["tcp_pos"]], [0.307, 0.0, 0.487], atol=1e-6)
    np.testing.assert_allclose(obs.state[slices["tcp_quat"]], [0, 1, 0, 0], atol=1e-6)
    assert obs.state[slices["gripper_width"]][0] == pytest.approx(0.04)


def test_apply_moves_the_target_and_the_arm_follows_without_jumps(arm_and_driver):
    arm, _, driver = arm_and_driver
    driver.observe()
    driver.apply(np.array([1.0, 0, 0, 0, 0, 0, 1], np.float32))  # +5 cm in x
    assert driver.tcp_targets()[0] == pytest.approx([0.357, 0.0, 0.487])
    wait_until(lambda: abs(pose_from_column_major(arm.pose)[0][0] - 0.357) < 1e-3, timeout=5, what="the arm")
    commanded = np.array([pose_from_column_major(p)[0] for p in arm.cartesian_commands])
    steps = np.linalg.norm(np.diff(commanded, axis=0), axis=1)
    assert steps.max() <= driver.config.max_speed_mps * 0.001 + 1e-9  # never a jump between 1 ms commands


def test_hold_stops_at_the_measured_pose(arm_and_driver):
    arm, _, driver = arm_and_driver
    driver.observe()
    driver.apply(np.array([1.0, 0, 0, 0, 0, 0, 1], np.float32))
    time.sleep(0.05)
    driver.hold()
    held = driver.tcp_targets()[0]
    assert 0.307 < held[0] < 0.357  # stopped part-way, where the arm was
    time.sleep(0.3)
    assert pose_from_column_major(arm.pose)[0][0] == pytest.approx(held[0], abs=0.01)


def test_gripper_closes_with_force_and_opens_with_move(arm_and_driver):
    _, plf, driver = arm_and_driver
    driver.observe()
    driver.apply(np.array([0, 0, 0, 0, 0, 0, -1.0], np.float32))
    wait_until(lambda: any(c[0] == "grasp" for c in plf.grippers[0].calls), timeout=5, what="a grasp")
    driver.apply(np.array([0, 0, 0, 0, 0, 0, 1.0], np.float32))
    wait_until(lambda: plf.grippers[0].calls[-1] == ("move", 0.08), timeout=5, what="an open")
    assert ("grasp", 0.0, 20.0) in plf.grippers[0].calls


def test_reset_homes_smoothly_then_resumes_cartesian_control(arm_and_driver):
    arm, _, driver = arm_and_driver
    driver.observe()
    driver.reset()
    joints = np.array(arm.joint_commands)
    np.testing.assert_allclose(joints[-1], driver.config.home_joints, atol=1e-9)
    assert np.abs(np.diff(joints, axis=0)).max() < 0.05  # no jump toward home
    driver.apply(np.array([0, 0, 0.5, 0, 0, 0, 1], np.float32))  # Cartesian control is back
    wait_until(lambda: pose_from_column_major(arm.pose)[0][2] > 0.49, timeout=5, what="motion after homing")


def test_a_reflex_error_surfaces_and_the_next_reset_recovers(arm_and_driver):
    arm, _, driver = arm_and_driver
    driver.observe()
    assert not arm.cartesian_commands  # no motion is started just by looking
    driver.apply(np.zeros(7, np.float32))
    arm.fail_next_read = "cartesian_reflex: collision"
    wait_until(lambda: driver._rt_error is not None, timeout=5, what="the reflex")
    with pytest.raises(DriverError, match="collision"):
        driver.apply(np.zeros(7, np.float32))
    assert driver.observe().state.shape == (22,)  # the state is still readable, for the trainer
    driver.reset()
    assert arm.recovered == 1
    driver.apply(np.array([0, 0.5, 0, 0, 0, 0, 1], np.float32))
    wait_until(lambda: pose_from_column_major(arm.pose)[0][1] > 0.01, timeout=5, what="motion after recovery")


def test_estop_stops_the_robot_and_refuses_motion(arm_and_driver):
    arm, _, driver = arm_and_driver
    driver.observe()
    driver.estop()
    assert arm.stopped
    with pytest.raises(DriverError, match="e-stopped"):
        driver.apply(np.array([1.0, 0, 0, 0, 0, 0, 1], np.float32))


def test_missing_pylibfranka_is_a_clear_error():
    driver = FrankaDriver(FrankaConfig())
    with pytest.raises(DriverError, match=r"pip install '\.\[franka\]'"):
        driver.observe()


def test_dual_franka_splits_one_action_between_two_arms_and_safety_sees_both():
    from robot_agent.drivers.dual_franka import DualFrankaConfig, DualFrankaDriver
    from robot_agent.safety import SafetyConfig, SafetyFilter

    left, right = FakeArm(), FakeArm()
    arms = iter([left, right])
    plf = make_fake_pylibfranka(left)
    plf.Robot = lambda host, realtime: FakeRobot(next(arms), host, realtime)  # one arm per host
    driver = DualFrankaDriver(DualFrankaConfig(), plf=plf)
    try:
        assert driver.spec.action.dim == 14 and driver.spec.action.names[7] == "right_dx"
        obs = driver.observe()
        assert obs.state.shape == (44,)
        safety = SafetyFilter(driver.spec, driver.arms, SafetyConfig(max_translation_m=0.01))
        action = np.zeros(14, np.float32)
        action[0], action[9] = 1.0, 1.0  # left +x, right +z, both at 5 cm
        safe, events = safety.limit(action, obs.state, None, driver.tcp_targets())
        assert {"clipped:left_translation", "clipped:right_translation"} <= set(events)
        driver.apply(safe)
        assert driver.tcp_targets()[0][0] == pytest.approx(0.317) and driver.tcp_targets()[1][
            2
        ] == pytest.approx(0.497)
        wait_until(lambda: pose_from_column_major(right.pose)[0][2] > 0.496, timeout=5, what="the right arm")
        assert pose_from_column_major(left.pose)[0][2] == pytest.approx(0.487, abs=1e-6)
    finally:
        driver.close()
