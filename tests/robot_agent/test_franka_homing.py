"""Homing respects the agent's limits: the path is checked against the box and timed to the speeds."""

import math

import numpy as np
import pytest

from protos.franka import PANDA
from robot_agent.drivers import DriverError
from robot_agent.drivers.franka import HOME_JOINTS, FrankaConfig, FrankaDriver
from robot_agent.drivers.homing import (
    PATH_SAMPLES,
    HomingLimits,
    HomingRefused,
    flange_pose,
    plan_homing,
)
from robot_agent.safety import SafetyConfig
from tests.robot_agent.fake_pylibfranka import FLANGE_TO_TCP, START_JOINTS_VARIABLE

# Left by hand beside the table: homing in a straight joint line from here rises 3 cm over a 0.6 m roof.
OVER_THE_ROOF = (0.67, -1.47, -1.08, -1.91, -0.3, 1.65, -0.04)
DEFAULT_BOX = HomingLimits(
    (0.2, -0.45, 0.02), (0.85, 0.45, 0.6), max_tcp_speed_mps=0.25, max_joint_speed_rads=0.5
)


def tcp_pose(joints) -> np.ndarray:
    return flange_pose(joints, PANDA) @ FLANGE_TO_TCP


def test_forward_kinematics_puts_the_flange_where_franka_documents_the_home_pose():
    flange = flange_pose(HOME_JOINTS, PANDA)
    np.testing.assert_allclose(flange[:3, 3], [0.3069, 0.0, 0.5903], atol=2e-4)
    np.testing.assert_allclose(flange[:3, 2], [0, 0, -1], atol=1e-9)  # the flange points straight down


def test_a_homing_path_that_leaves_the_box_is_refused_with_where_it_would_go():
    start = tcp_pose(OVER_THE_ROOF)
    assert (start[:3, 3] < DEFAULT_BOX.workspace_high).all()  # it starts inside the box
    with pytest.raises(
        HomingRefused, match=r"3\d mm outside the workspace box, at \[0\.2\d*, -0\.\d+, 0\.63"
    ):
        plan_homing(OVER_THE_ROOF, start, HOME_JOINTS, 4.0, DEFAULT_BOX, PANDA)
    # The same start under a higher roof homes.
    roomy = HomingLimits((0.2, -0.45, 0.02), (0.85, 0.45, 0.7), 0.25, 0.5)
    plan = plan_homing(OVER_THE_ROOF, start, HOME_JOINTS, 4.0, roomy, PANDA)
    assert plan.tcp_path[:, 2].max() == pytest.approx(0.632, abs=0.005)


def test_a_start_outside_the_box_may_home_if_it_only_comes_back_in():
    start_joints = np.array(HOME_JOINTS) + np.array([0, 0.25, 0, 0.25, 0, 0, 0])
    start = tcp_pose(start_joints)
    low_roof = HomingLimits((0.2, -0.45, 0.02), (0.85, 0.45, start[2, 3] - 0.01), 0.25, 0.5)
    assert start[2, 3] > low_roof.workspace_high[2]
    plan = plan_homing(start_joints, start, HOME_JOINTS, 1.0, low_roof, PANDA)
    assert plan.tcp_path[-1, 2] < low_roof.workspace_high[2]


@pytest.mark.parametrize("min_duration_s", [0.5, 4.0])
def test_the_duration_stretches_until_no_joint_and_not_the_tcp_moves_faster_than_its_limit(min_duration_s):
    start = np.array(HOME_JOINTS) + np.array([1.2, 0.3, -0.4, 0.5, 0.6, -0.3, 1.0])
    limits = HomingLimits((-1, -1, -1), (1, 1, 1.5), max_tcp_speed_mps=0.1, max_joint_speed_rads=0.4)
    plan = plan_homing(start, tcp_pose(start), HOME_JOINTS, min_duration_s, limits, PANDA)
    assert plan.duration_s >= min_duration_s
    # Run the arm process's cosine blend at 1 kHz and measure the speeds it would command.
    t = np.arange(0.0, plan.duration_s, 0.001)
    blend = 0.5 * (1.0 - np.cos(np.pi * t / plan.duration_s))
    joints = start + blend[:, None] * (np.array(HOME_JOINTS) - start)
    joint_speed = np.abs(np.diff(joints, axis=0)).max() / 0.001
    tcp = np.array([tcp_pose(q)[:3, 3] for q in joints[::10]])
    tcp_speed = np.linalg.norm(np.diff(tcp, axis=0), axis=1).max() / 0.010
    assert joint_speed <= limits.max_joint_speed_rads * 1.01
    assert tcp_speed <= limits.max_tcp_speed_mps * 1.02
    assert max(joint_speed / 0.4, tcp_speed / 0.1) > 0.9  # and not needlessly slow
    assert len(plan.tcp_path) == PATH_SAMPLES and math.isfinite(plan.peak_tcp_speed_mps)


def test_the_franka_driver_refuses_to_home_out_of_the_box_and_does_not_move(monkeypatch):
    monkeypatch.setenv(START_JOINTS_VARIABLE, ",".join(map(str, OVER_THE_ROOF)))
    driver = FrankaDriver(FrankaConfig(home_duration_s=0.2), plf_module="tests.robot_agent.fake_pylibfranka")
    try:
        driver.set_safety_limits(SafetyConfig())
        with pytest.raises(DriverError, match=r"outside the workspace box.*guiding mode"):
            driver.reset()
        np.testing.assert_allclose(driver.observe().state[:7], OVER_THE_ROOF, atol=1e-9)
        driver.set_safety_limits(SafetyConfig(workspace_high=(0.85, 0.45, 0.7)))
        driver.reset()
        np.testing.assert_allclose(driver.observe().state[:7], HOME_JOINTS, atol=1e-6)
    finally:
        driver.close()


def test_homing_plans_with_the_arms_own_kinematics():
    """The same planner homes a UR5e through UR's DH table, checked against the UR5e's own box."""
    from protos.ur5e import UR5E

    box = HomingLimits(
        UR5E.workspace_low, UR5E.workspace_high, max_tcp_speed_mps=0.25, max_joint_speed_rads=0.5
    )
    start_joints = np.asarray(UR5E.home_joints) + np.array([0.4, 0.2, -0.3, 0.1, 0.0, 0.5])
    start = UR5E.forward_kinematics(start_joints)
    plan = plan_homing(start_joints, start, UR5E.home_joints, 1.0, box, UR5E)
    np.testing.assert_allclose(plan.tcp_path[-1], UR5E.forward_kinematics(UR5E.home_joints)[:3, 3], atol=1e-9)
    assert plan.duration_s >= 1.57 * 0.5 / 0.5  # the 0.5 rad joint move at 0.5 rad/s, peak pi/2 x mean
    # From near the UR5e's +x wall, the joint path home swings out past it (9 mm, x = 0.759 m):
    # refused in the UR5e's box, allowed in the Panda's (which ends at x = 0.85 m).
    out_joints = np.asarray(UR5E.home_joints) + np.array([-0.9, 0.8, -0.2, -0.7, 1.2, 0.0])
    out = UR5E.forward_kinematics(out_joints)
    plan_homing(out_joints, out, UR5E.home_joints, 1.0, DEFAULT_BOX, UR5E)
    with pytest.raises(HomingRefused, match="9 mm outside the workspace box"):
        plan_homing(out_joints, out, UR5E.home_joints, 1.0, box, UR5E)
