"""Each local safety rule stops the bad thing it guards against."""

import numpy as np
import pytest

from protos import ContractError
from protos.env_spec import ActionSpace, CameraSpec, EnvSpec, StateField, ee_delta_action_space
from robot_agent.safety import ArmScaling, SafetyConfig, SafetyFilter
from robot_agent.watchdog import Watchdog

SCALE = ArmScaling(max_translation_m=0.05, max_rotation_rad=0.3)


def arm_spec(action: ActionSpace | None = None) -> EnvSpec:
    return EnvSpec(
        name="test/arm",
        cameras=(CameraSpec("front", 8, 8, 10.0),),
        state_fields=(StateField("joint_pos", 7), StateField("tcp_pos", 3), StateField("gripper_width", 1)),
        action=action or ee_delta_action_space(rotation=True),
        control_hz=10.0,
        instruction="test",
        max_episode_steps=10,
    )


def state_at(tcp) -> np.ndarray:
    state = np.zeros(11, np.float32)
    state[7:10] = tcp
    return state


def make_filter(**overrides) -> SafetyFilter:
    return SafetyFilter(arm_spec(), (SCALE,), SafetyConfig(**overrides))


def test_workspace_box_keeps_the_target_inside():
    safety = make_filter(workspace_high=(0.85, 0.45, 0.30), max_translation_m=0.05)
    action = np.array([0, 0, 1.0, 0, 0, 0, 1], np.float32)  # +5 cm up from z = 0.28
    safe, events = safety.limit(action, state_at([0.5, 0.0, 0.28]), None)
    target_z = 0.28 + safe[2] * SCALE.max_translation_m
    assert target_z == pytest.approx(0.30, abs=1e-6)
    assert "clipped:workspace" in events


def test_workspace_box_brings_an_outside_tcp_back_slowly():
    safety = make_filter(workspace_high=(0.85, 0.45, 0.30), max_translation_m=0.02)
    safe, _ = safety.limit(np.zeros(7, np.float32), state_at([0.5, 0.0, 0.40]), None)
    moved = safe[:3] * SCALE.max_translation_m
    assert moved[2] < 0 and np.linalg.norm(moved) == pytest.approx(0.02, abs=1e-6)


def test_translation_per_step_is_limited():
    safety = make_filter(max_translation_m=0.01)
    safe, events = safety.limit(np.array([1, 1, 0, 0, 0, 0, 1], np.float32), state_at([0.5, 0, 0.3]), None)
    assert np.linalg.norm(safe[:3] * SCALE.max_translation_m) == pytest.approx(0.01, rel=1e-5)
    assert "clipped:translation" in events
    # A small step passes untouched.
    small = np.array([0.1, 0, 0, 0, 0, 0, 1], np.float32)
    safe, events = safety.limit(small, state_at([0.5, 0, 0.3]), None)
    np.testing.assert_allclose(safe, small, atol=1e-6)
    assert events == []


def test_rotation_per_step_is_limited():
    safety = make_filter(max_rotation_rad=0.1)
    safe, events = safety.limit(np.array([0, 0, 0, 1, 1, 1, 1], np.float32), state_at([0.5, 0, 0.3]), None)
    assert np.linalg.norm(safe[3:6] * SCALE.max_rotation_rad) == pytest.approx(0.1, rel=1e-5)
    assert "clipped:rotation" in events


def test_gripper_rate_is_limited():
    safety = make_filter(max_gripper_change=0.5)
    previous = np.array([0, 0, 0, 0, 0, 0, 1.0], np.float32)  # open
    safe, events = safety.limit(
        np.array([0, 0, 0, 0, 0, 0, -1.0], np.float32), state_at([0.5, 0, 0.3]), previous
    )
    assert safe[6] == pytest.approx(0.5)
    assert "clipped:gripper_rate" in events


@pytest.mark.parametrize(
    ("chunk", "message"),
    [
        (np.array([[0, 0, np.nan, 0, 0, 0, 0]], np.float32), "nan"),
        (np.array([[0, 0, np.inf, 0, 0, 0, 0]], np.float32), "inf"),
        (np.zeros((2, 6), np.float32), "shape"),
        (np.array([[0, 0, 3.0, 0, 0, 0, 0]], np.float32), "outside"),
        (np.zeros((2, 3, 7), np.float32), "shape"),
    ],
)
def test_malformed_chunks_are_rejected_whole(chunk, message):
    with pytest.raises(ContractError, match=message):
        make_filter().check_chunk(chunk)


def test_joint_actions_are_refused_with_a_clear_message():
    joint = ActionSpace(kind="joint_position", names=tuple("abcdefg"), low=(-1,) * 7, high=(1,) * 7)
    with pytest.raises(ValueError, match="end-effector control"):
        SafetyFilter(arm_spec(joint), (SCALE,), SafetyConfig())


def test_bad_safety_config_is_named():
    with pytest.raises(ValueError, match="workspace"):
        SafetyConfig(workspace_low=(0, 0, 1), workspace_high=(1, 1, 0.5))
    with pytest.raises(ValueError, match="max_translation_m"):
        SafetyConfig(max_translation_m=0)


def test_watchdog_trips_at_its_deadline():
    now = [100.0]
    dog = Watchdog(0.2, clock=lambda: now[0])
    now[0] = 100.19
    assert not dog.expired()
    now[0] = 100.2
    assert dog.expired()
    dog.feed()
    assert not dog.expired() and dog.deadline() == pytest.approx(100.4)


def test_the_box_bounds_the_commanded_target_not_just_the_measured_tcp():
    # The controller's target already leads the (lagging) TCP by 4 cm: the box must bound the target.
    safety = make_filter(workspace_high=(0.85, 0.45, 0.30), max_translation_m=0.05)
    action = np.array([0, 0, 1.0, 0, 0, 0, 1], np.float32)
    safe, events = safety.limit(action, state_at([0.5, 0, 0.24]), None, targets=(np.array([0.5, 0, 0.28]),))
    assert 0.28 + safe[2] * SCALE.max_translation_m == pytest.approx(0.30, abs=1e-6)
    assert "clipped:workspace" in events
