"""The franka driver's logic through the pylibfranka seam: smooth 1 kHz setpoints, gripper, homing, e-stop."""

import time

import numpy as np
import pytest

from protos.pose_math import matrix_to_quat, matrix_to_rotvec, rotvec_to_matrix
from robot_agent.drivers import DriverError
from robot_agent.drivers.franka import FrankaConfig, FrankaDriver, SetpointFilter
from tests.integration.link_harness import wait_until

FAKE = "tests.robot_agent.fake_pylibfranka"
STEP_X = np.array([1.0, 0, 0, 0, 0, 0, 1], np.float32)  # +5 cm in x, gripper open


@pytest.fixture
def driver():
    driver = FrankaDriver(FrankaConfig(host="10.0.0.2", home_duration_s=0.2), plf_module=FAKE)
    yield driver
    driver.close()


def tcp(driver) -> np.ndarray:
    return driver.observe().state[14:17]


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
    filt = SetpointFilter(cfg.motion_limits, start, np.eye(3))
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


def test_observe_reports_the_sim_twin_state_layout(driver):
    obs = driver.observe()
    slices = driver.spec.state_slices()
    assert obs.state.shape == (driver.spec.state_dim,) == (22,)
    np.testing.assert_allclose(obs.state[slices["tcp_pos"]], [0.307, 0.0, 0.487], atol=1e-6)
    np.testing.assert_allclose(obs.state[slices["tcp_quat"]], [0, 1, 0, 0], atol=1e-6)
    assert obs.state[slices["gripper_width"]][0] == pytest.approx(0.04)


def test_apply_moves_the_target_and_the_arm_follows(driver):
    driver.observe()
    driver.apply(STEP_X)
    assert driver.tcp_targets()[0].position == pytest.approx([0.357, 0.0, 0.487])
    wait_until(lambda: abs(tcp(driver)[0] - 0.357) < 1e-3, timeout=10, what="the arm")
    assert driver.rt_overruns >= 0


def test_hold_stops_at_the_measured_pose(driver):
    driver.observe()
    driver.apply(STEP_X)
    wait_until(lambda: tcp(driver)[0] > 0.32, timeout=10, what="motion")
    driver.hold()
    held = driver.tcp_targets()[0].position
    assert 0.32 < held[0] < 0.357  # it brakes part-way, short of the old target
    # It comes to rest at the braking point it reported, not back at the hold, and stays there.
    wait_until(lambda: abs(tcp(driver)[0] - held[0]) < 5e-4, timeout=10, what="the braking point")
    time.sleep(0.3)
    assert tcp(driver)[0] == pytest.approx(held[0], abs=5e-4)


def test_braking_comes_to_rest_at_the_stopping_point_without_running_past_it():
    """Held anywhere in a move (accelerating, cruising, slowing), the profile stops where it said."""
    limits = FrankaConfig().motion_limits
    start, goal = np.array([0.3, 0.0, 0.5]), np.array([0.4, 0.05, 0.5])
    for hold_after in (40, 120, 300, 500, 650):
        filt = SetpointFilter(limits, start, np.eye(3))
        for _ in range(hold_after):
            filt.step(0.001, goal, np.eye(3))
        stop = filt.stopping_point()
        direction = (stop - filt.position) / np.linalg.norm(stop - filt.position)
        furthest = 0.0
        for _ in range(2000):
            filt.step(0.001, stop, np.eye(3))
            furthest = max(furthest, float((filt.position - stop) @ direction))
        assert furthest < 5e-4, f"held after {hold_after} ms it ran {furthest * 1e3:.1f} mm past"
        np.testing.assert_allclose(filt.position, stop, atol=1e-4)


def test_gripper_closes_with_force_and_opens_with_move(driver):
    driver.observe()
    driver.apply(np.array([0, 0, 0, 0, 0, 0, -1.0], np.float32))
    wait_until(
        lambda: driver.observe().state[21] == pytest.approx(0.015), timeout=10, what="a grasp on the object"
    )
    driver.apply(np.array([0, 0, 0, 0, 0, 0, 1.0], np.float32))
    wait_until(lambda: driver.observe().state[21] == pytest.approx(0.04), timeout=10, what="an open gripper")


def test_reset_homes_with_a_joint_motion(driver):
    driver.observe()
    driver.reset()
    np.testing.assert_allclose(driver.observe().state[:7], driver.config.home_joints, atol=1e-6)
    driver.apply(np.array([0, 0, 0.5, 0, 0, 0, 1], np.float32))  # Cartesian control starts again
    wait_until(lambda: tcp(driver)[2] > 0.49, timeout=10, what="motion after homing")


def test_a_reflex_surfaces_as_a_driver_error_and_the_next_reset_recovers(driver):
    driver.observe()
    with pytest.raises(DriverError, match="reflex"):
        for _ in range(100):  # push +x until the arm trips its reflex at x = 0.45
            driver.apply(STEP_X)
            time.sleep(0.05)
    assert driver.observe().state.shape == (22,)  # the state stays readable, for the trainer
    stuck = tcp(driver)[0]
    driver.reset()
    driver.apply(np.array([-1.0, 0, 0, 0, 0, 0, 1], np.float32))
    wait_until(lambda: tcp(driver)[0] < stuck - 0.01, timeout=10, what="motion after recovery")


def test_estop_stops_the_robot_and_refuses_motion(driver):
    driver.observe()
    driver.apply(STEP_X)
    driver.estop()
    with pytest.raises(DriverError, match="e-stopped"):
        driver.apply(STEP_X)
    with pytest.raises(DriverError, match="e-stopped"):
        driver.reset()


def test_connection_failures_are_one_clear_error():
    with pytest.raises(DriverError, match=r"pip install '\.\[franka\]'"):
        FrankaDriver(FrankaConfig(), plf_module="no_such_pylibfranka").observe()
    driver = FrankaDriver(FrankaConfig(host="10.255.255.1"), plf_module=FAKE)
    with pytest.raises(DriverError, match=r"cannot connect to the Franka at 10\.255\.255\.1: .*timeout"):
        driver.observe()
    driver.close()
    driver = FrankaDriver(FrankaConfig(host="10.255.255.2"), plf_module=FAKE)
    with pytest.raises(
        DriverError, match=r"server version: 10.*need pylibfranka >= 0\.18: pip install"
    ) as raised:
        driver.observe()
    assert "\n" not in str(raised.value)
    driver.close()


def test_dual_franka_splits_one_action_between_two_arms_and_safety_sees_both():
    from robot_agent.drivers.dual_franka import DualFrankaConfig, DualFrankaDriver
    from robot_agent.safety import SafetyConfig, SafetyFilter

    driver = DualFrankaDriver(DualFrankaConfig(), plf_module=FAKE)
    try:
        assert driver.spec.action.dim == 14 and driver.spec.action.names[7] == "right_dx"
        obs = driver.observe()
        assert obs.state.shape == (44,)
        safety = SafetyFilter(
            driver.spec, driver.arms, SafetyConfig(max_translation_m=0.01), driver.embodiment
        )
        action = np.zeros(14, np.float32)
        action[0], action[9] = 1.0, 1.0  # left +x, right +z, both at 5 cm
        safe, events = safety.limit(action, obs.state, None, driver.tcp_targets())
        assert {"clipped:left_translation", "clipped:right_translation"} <= set(events)
        driver.apply(safe)
        targets = driver.tcp_targets()
        assert targets[0].position[0] == pytest.approx(0.317) and targets[1].position[2] == pytest.approx(
            0.497
        )
        wait_until(lambda: driver.observe().state[22 + 16] > 0.496, timeout=10, what="the right arm")
        assert driver.observe().state[16] == pytest.approx(0.487, abs=1e-6)  # the left arm did not rise
    finally:
        driver.close()
