"""The sim twin's scripted expert as a teleop device: it drives, takes over when the robot strays, or
advises; it refuses drivers it cannot watch."""

from __future__ import annotations

import numpy as np
import pytest

from robot_agent.drivers import make_driver
from robot_agent.teleop import TeleopError, TeleopMapper, make_teleop

TWIN = {"task": "pick_lift", "cameras": [], "control_hz": 10.0, "randomization": "none"}


@pytest.fixture
def twin():
    driver = make_driver("sim-twin", TWIN)
    yield driver
    driver.close()


def start(driver, **config):
    device = make_teleop("expert", config)
    device.bind(driver)
    driver.reset(seed=3)
    device.start_episode()
    return device, TeleopMapper(driver.spec)


def hold_action(driver) -> np.ndarray:
    action = np.zeros(driver.spec.action.dim, np.float32)
    action[-1] = 1.0
    return action


def test_always_mode_drives_pick_lift_to_success_through_the_mapper(twin):
    device, mapper = start(twin, mode="always")
    successes = []
    for _ in range(twin.spec.max_episode_steps):
        reading = device.poll()
        assert reading.takeover and not reading.advice
        successes.append(twin.apply(mapper.to_action(reading)).success)
    assert any(successes)


def test_gated_mode_takes_over_from_a_robot_that_does_not_move_then_gives_back(twin):
    device, mapper = start(twin, mode="gated", patience=3, takeover_ticks=5)
    takeovers = []
    for _ in range(20):
        reading = device.poll()
        takeovers.append(reading.takeover)
        twin.apply(mapper.to_action(reading) if reading.takeover else hold_action(twin))
    # Poll 0 has no motion to judge; polls 1-3 stray (the arm stands still): the 4th poll takes over,
    # for exactly takeover_ticks, then it watches again.
    assert takeovers[:9] == [False] * 3 + [True] * 5 + [False]
    assert sum(takeovers) > 5  # the arm still does not move on its own: it takes over again


def test_gated_mode_leaves_a_robot_alone_that_follows_the_expert(twin):
    device, mapper = start(twin, mode="gated", patience=2)
    shadow = make_teleop("expert", {"mode": "always"})  # the same expert, driving "as the policy"
    shadow.bind(twin)
    shadow.start_episode()
    for _ in range(60):
        reading = device.poll()
        assert not reading.takeover
        twin.apply(mapper.to_action(shadow.poll()))


def test_advise_mode_labels_every_tick_and_never_drives(twin):
    device, _ = start(twin, mode="advise")
    for _ in range(5):
        reading = device.poll()
        assert reading.advice and not reading.takeover
        assert np.abs(reading.motion[:3]).sum() > 0  # the cube is away from the TCP: it wants to move
        twin.apply(hold_action(twin))


def test_expert_refuses_a_driver_without_a_simulator_and_bad_config():
    device = make_teleop("expert", {})

    class RealArm:
        pass

    with pytest.raises(TeleopError, match="needs the sim-twin driver"):
        device.bind(RealArm())
    with pytest.raises(TeleopError, match="before it was bound"):
        device.poll()
    with pytest.raises(TeleopError, match="expert mode must be one of"):
        make_teleop("expert", {"mode": "sometimes"})


def test_gated_mode_takes_over_when_the_gripper_disagrees(twin):
    """The arm follows the expert's motion exactly but has its gripper shut from the start."""
    device, mapper = start(twin, mode="gated", patience=3)
    shadow = make_teleop("expert", {"mode": "always"})
    shadow.bind(twin)
    shadow.start_episode()
    takeovers = []
    for _ in range(10):
        reading = device.poll()
        takeovers.append(reading.takeover)
        action = mapper.to_action(shadow.poll())
        action[-1] = -1.0  # closed, while the expert approaches with an open hand
        twin.apply(action)
    assert True in takeovers and takeovers.index(True) <= 5
