"""The ur5e driver against a stand-in for ur_rtde's API (``fake_ur_rtde``) in its real helper
processes: homing through the UR5e's kinematics, servoing the TCP, the protective stop, the gripper."""

from __future__ import annotations

import time

import numpy as np
import pytest

from protos.ur5e import UR5E
from robot_agent.config import AgentConfigError
from robot_agent.drivers import DriverError, make_driver
from robot_agent.drivers.ur5e import UR5eConfig, UR5eDriver
from robot_agent.drivers.ur5e_process import ServoModules

FAKE = "tests.robot_agent.fake_ur_rtde"
pytestmark = pytest.mark.slow


def fake_driver(host: str = "10.0.0.3", **config) -> UR5eDriver:
    return UR5eDriver(
        UR5eConfig(host=host, **config), rtde_modules=ServoModules(FAKE, FAKE, FAKE), gripper_module=FAKE
    )


@pytest.fixture
def driver():
    driver = fake_driver()
    yield driver
    driver.close()


def fields(driver, state):
    slices = driver.spec.state_slices()
    return {name: state[s] for name, s in slices.items()}


def settle(driver, seconds=0.6):
    time.sleep(seconds)
    return fields(driver, driver.observe().state)


def test_reset_homes_and_observe_reports_the_ur5es_state(driver):
    driver.reset()
    state = settle(driver, 0.1)
    np.testing.assert_allclose(state["joint_pos"], UR5E.home_joints, atol=1e-6)
    np.testing.assert_allclose(state["tcp_pos"], UR5E.forward_kinematics(UR5E.home_joints)[:3, 3], atol=1e-5)
    assert driver.spec.state_dim == UR5E.state_dim and driver.observe().state.shape == (UR5E.state_dim,)


def test_an_action_moves_the_tcp_target_and_the_servo_follows_it(driver):
    driver.reset()
    start = settle(driver, 0.1)["tcp_pos"]
    driver.apply(np.array([1.0, 0, 0, 0, 0, 0, 1.0], np.float32))  # +5 cm in x
    moved = settle(driver)["tcp_pos"] - start
    assert 0.045 < moved[0] < 0.0501 and abs(moved[1]) < 1e-3 and abs(moved[2]) < 1e-3, moved
    (target,) = driver.tcp_targets()
    np.testing.assert_allclose(target.position, start + np.array([0.05, 0, 0]), atol=1e-6)
    driver.hold()  # brakes where it is, no jump back
    assert abs(settle(driver, 0.2)["tcp_pos"][0] - start[0] - 0.05) < 5e-3


def test_a_protective_stop_holds_the_driver_until_a_reset_unlocks_it(driver):
    driver.reset()
    down = np.array([0, 0, -1.0, 0, 0, 0, 1.0], np.float32)
    with pytest.raises(
        DriverError, match="the UR5e stopped: protective stop; the next episode reset recovers it"
    ):
        for _ in range(20):  # 5 cm a tick toward the table (the stand-in stops below 5 cm)
            driver.apply(down)
            time.sleep(0.3)
    driver.reset()  # unlocks through the dashboard and homes
    state = settle(driver, 0.1)
    np.testing.assert_allclose(state["joint_pos"], UR5E.home_joints, atol=1e-6)
    driver.apply(np.array([0, 1.0, 0, 0, 0, 0, 1.0], np.float32))  # moving again
    assert settle(driver)["tcp_pos"][1] > state["tcp_pos"][1] + 0.04


def test_the_gripper_opens_and_closes_on_the_action(driver):
    driver.reset()
    assert settle(driver, 0.3)["gripper_width"][0] == pytest.approx(UR5E.gripper.max_width_m / 2, abs=1e-3)
    driver.apply(np.array([0, 0, 0, 0, 0, 0, -1.0], np.float32))
    assert settle(driver, 0.3)["gripper_width"][0] < 1e-3


def test_bad_hosts_configs_and_a_missing_library_are_one_line():
    unreachable = fake_driver("10.255.0.1")
    with pytest.raises(DriverError, match=r"cannot connect to the UR controller at 10\.255\.0\.1: timeout"):
        unreachable.observe()
    missing = UR5eDriver(UR5eConfig(), rtde_modules=ServoModules("no_such_rtde_control"))
    with pytest.raises(DriverError, match=r"needs no_such_rtde_control \(ur_rtde\): pip install '\.\[ur\]'"):
        missing.observe()
    with pytest.raises(
        AgentConfigError, match=r"ur5e config: home_joints needs 6 values within the UR5e's joint limits"
    ):
        make_driver("ur5e", {"home_joints": [0.0, 0.0, 4.0, 0.0, 0.0, 0.0]})
    with pytest.raises(AgentConfigError, match=r"servo_gain in \[100, 2000\]"):
        make_driver("ur5e", {"servo_gain": 5000.0})


def test_the_agent_holds_a_ur5e_to_its_own_box():
    driver = make_driver("ur5e", {})  # no connection until it is used
    assert driver.safety_limits.workspace_low == UR5E.workspace_low
    assert driver.safety_limits.workspace_high == UR5E.workspace_high
