"""Each local safety rule stops the bad thing it guards against."""

import numpy as np
import pytest

from protos import ContractError
from protos.env_spec import ActionSpace, CameraSpec, EnvSpec, StateField, ee_delta_action_space
from protos.franka import PANDA
from protos.pose_math import matrix_to_quat, matrix_to_rotvec, quat_to_matrix, rotvec_to_matrix
from robot_agent.safety import ArmScaling, SafetyConfig, SafetyFilter, TcpPose
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
    return SafetyFilter(arm_spec(), (SCALE,), SafetyConfig(**overrides), PANDA)


def test_workspace_box_keeps_the_target_inside():
    safety = make_filter(workspace_high=(*PANDA.workspace_high[:2], 0.30), max_translation_m=0.05)
    action = np.array([0, 0, 1.0, 0, 0, 0, 1], np.float32)  # +5 cm up from z = 0.28
    safe, events = safety.limit(action, state_at([0.5, 0.0, 0.28]), None)
    target_z = 0.28 + safe[2] * SCALE.max_translation_m
    assert target_z == pytest.approx(0.30, abs=1e-6)
    assert "clipped:workspace" in events


def test_workspace_box_brings_an_outside_tcp_back_slowly():
    safety = make_filter(workspace_high=(*PANDA.workspace_high[:2], 0.30), max_translation_m=0.02)
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
        SafetyFilter(arm_spec(joint), (SCALE,), SafetyConfig(), PANDA)


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
    safety = make_filter(workspace_high=(*PANDA.workspace_high[:2], 0.30), max_translation_m=0.05)
    action = np.array([0, 0, 1.0, 0, 0, 0, 1], np.float32)
    safety = make_filter(
        workspace_high=(*PANDA.workspace_high[:2], 0.30), max_translation_m=0.05, max_target_lead_m=0.1
    )
    safe, events = safety.limit(
        action, state_at([0.5, 0, 0.24]), None, targets=(TcpPose(np.array([0.5, 0, 0.28])),)
    )
    assert 0.28 + safe[2] * SCALE.max_translation_m == pytest.approx(0.30, abs=1e-6)
    assert "clipped:workspace" in events


def test_the_target_never_leads_the_measured_tcp_by_more_than_the_lead():
    # The arm is stuck 1 cm behind its target; pushing on would store up a jump for when it frees.
    safety = make_filter(max_translation_m=0.05, max_target_lead_m=0.02)
    targets = (TcpPose(np.array([0.51, 0.0, 0.3])),)
    for _ in range(3):
        safe, events = safety.limit(
            np.array([1, 0, 0, 0, 0, 0, 1], np.float32), state_at([0.5, 0, 0.3]), None, targets
        )
        targets = (TcpPose(targets[0].position + safe[:3] * SCALE.max_translation_m),)
        assert "clipped:lead" in events
    assert targets[0].position[0] == pytest.approx(0.52, abs=1e-6)


def test_a_tcp_that_crossed_a_wall_is_pulled_back_inside_by_as_much():
    safety = make_filter(workspace_high=(*PANDA.workspace_high[:2], 0.30))
    # The target sits on the wall, but the measured TCP coasted 1 cm past it: the target goes 1 cm inside.
    safe, events = safety.limit(
        np.zeros(7, np.float32), state_at([0.5, 0, 0.31]), None, (TcpPose(np.array([0.5, 0, 0.30])),)
    )
    assert 0.30 + safe[2] * SCALE.max_translation_m == pytest.approx(0.29, abs=1e-6)
    assert "clipped:workspace" in events


def test_a_tcp_heading_past_a_wall_is_braked_before_it_crosses():
    safety = make_filter(workspace_high=(*PANDA.workspace_high[:2], 0.30))
    up = np.array([0, 0, 0.2, 0, 0, 0, 1], np.float32)
    safety.limit(up, state_at([0.5, 0, 0.26]), None)
    # 3 cm a step and 1 cm from the wall: a step on it would be 2 cm past, so the wall moves in 2 cm.
    safe, events = safety.limit(up, state_at([0.5, 0, 0.29]), None, (TcpPose(np.array([0.5, 0, 0.29])),))
    assert 0.29 + safe[2] * SCALE.max_translation_m == pytest.approx(0.28, abs=1e-6)
    assert "clipped:workspace" in events
    # A new episode forgets the speed: nothing to brake from a standing start.
    safety.begin_episode()
    safe, events = safety.limit(up, state_at([0.5, 0, 0.285]), None, (TcpPose(np.array([0.5, 0, 0.285])),))
    assert 0.285 + safe[2] * SCALE.max_translation_m == pytest.approx(0.295, abs=1e-6) and events == []


def quat_spec() -> EnvSpec:
    fields = (
        StateField("joint_pos", 7),
        StateField("tcp_pos", 3),
        StateField("tcp_quat", 4),
        StateField("gripper_width", 1),
    )
    return EnvSpec(
        name="test/arm", cameras=(CameraSpec("front", 8, 8, 10.0),), state_fields=fields,
        action=ee_delta_action_space(rotation=True), control_hz=10.0, instruction="test", max_episode_steps=10,
    )  # fmt: skip


def state_with(tcp, rotation: np.ndarray) -> np.ndarray:
    return np.concatenate([np.zeros(7), tcp, matrix_to_quat(rotation), [0.04]]).astype(np.float32)


def test_orientation_stays_within_its_bound_of_the_episode_start_however_long_it_is_pushed():
    safety = SafetyFilter(
        quat_spec(), (SCALE,), SafetyConfig(max_orientation_change_rad=0.5, max_rotation_lead_rad=0.2), PANDA
    )
    start = rotvec_to_matrix(np.array([np.pi, 0, 0]))  # gripper pointing down
    commanded, measured = start, start
    events = []
    for _ in range(20):  # 20 full-rate turns about z: 0.2 rad each, 4 rad asked in all
        state = state_with([0.5, 0, 0.3], measured)
        pose = TcpPose(
            np.array([0.5, 0, 0.3]), __import__("protos.pose_math").pose_math.matrix_to_quat(commanded)
        )
        safe, events = safety.limit(np.array([0, 0, 0, 0, 0, 1, 1], np.float32), state, None, (pose,))
        commanded = rotvec_to_matrix(safe[3:6] * SCALE.max_rotation_rad) @ commanded
        measured = commanded  # a perfect arm
    turned = np.linalg.norm(matrix_to_rotvec(commanded @ start.T))
    assert turned == pytest.approx(0.5, abs=1e-4)
    assert "clipped:orientation" in events


def test_the_orientation_target_never_leads_the_measured_orientation_by_more_than_the_lead():
    safety = SafetyFilter(quat_spec(), (SCALE,), SafetyConfig(max_rotation_lead_rad=0.1), PANDA)
    start = rotvec_to_matrix(np.array([np.pi, 0, 0]))
    commanded = start
    for _ in range(5):  # the wrist is blocked: the measured orientation stays at the start
        pose = TcpPose(np.array([0.5, 0, 0.3]), matrix_to_quat(commanded))
        safe, events = safety.limit(
            np.array([0, 0, 0, 0, 0, 1, 1], np.float32), state_with([0.5, 0, 0.3], start), None, (pose,)
        )
        commanded = rotvec_to_matrix(safe[3:6] * SCALE.max_rotation_rad) @ commanded
    assert np.linalg.norm(matrix_to_rotvec(commanded @ start.T)) == pytest.approx(0.1, abs=1e-4)
    assert "clipped:rotation_lead" in events
    assert quat_to_matrix(matrix_to_quat(commanded)) == pytest.approx(commanded, abs=1e-9)


@pytest.mark.parametrize(
    ("corrupt", "named"),
    [
        (
            lambda s: s.__setitem__(slice(10, 14), 0.0),
            "tcp_quat is not a unit quaternion",
        ),  # a zero quaternion
        (lambda s: s.__setitem__(11, np.nan), "tcp_quat is not a unit quaternion"),
        (lambda s: s.__setitem__(8, np.nan), "tcp_pos is not finite"),
    ],
)
def test_a_measured_pose_that_is_not_one_stops_the_action_instead_of_becoming_nan(corrupt, named):
    from robot_agent.safety import UnusableState

    safety = SafetyFilter(quat_spec(), (SCALE,), SafetyConfig(), PANDA)
    state = state_with([0.5, 0, 0.3], rotvec_to_matrix(np.array([np.pi, 0, 0])))
    turn = np.array([0.1, 0, 0, 0, 0, 0.5, 1], np.float32)
    assert np.isfinite(safety.limit(turn, state, None)[0]).all()
    corrupt(state)
    with pytest.raises(UnusableState, match=named):
        safety.limit(turn, state, None)


def test_a_commanded_target_that_is_not_finite_stops_the_action():
    from robot_agent.safety import UnusableState

    safety = SafetyFilter(quat_spec(), (SCALE,), SafetyConfig(), PANDA)
    state = state_with([0.5, 0, 0.3], rotvec_to_matrix(np.array([np.pi, 0, 0])))
    with pytest.raises(UnusableState, match="commanded TCP is not finite"):
        safety.limit(np.zeros(7, np.float32), state, None, (TcpPose(np.array([0.5, np.nan, 0.3])),))
