"""The robot as data: each arm's kinematics, limits and default box come from its Embodiment, and no
arm inherits another's box."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from protos.embodiment import MODIFIED_DH, STANDARD_DH, DHRow, dh_link_transform
from protos.env_spec import StateField, ee_delta_action_space
from protos.franka import PANDA
from protos.ur5e import UR5E
from robot_agent.safety import ArmScaling, SafetyConfig, SafetyFilter


def test_ur5e_forward_kinematics_matches_urs_published_zero_pose():
    """UR's DH table puts the flange at (a2 + a3, -(d4 + d6), d1 - d5) when every joint is at zero."""
    flange = UR5E.forward_kinematics((0.0,) * 6, tcp=False)
    np.testing.assert_allclose(flange[:3, 3], [-0.8172, -0.2329, 0.0628], atol=1e-9)
    home = UR5E.forward_kinematics(UR5E.home_joints)
    np.testing.assert_allclose(home[:3, 2], [0.0, 0.0, -1.0], atol=1e-9)  # the tool points down
    assert np.all(home[:3, 3] > np.asarray(UR5E.workspace_low)) and np.all(
        home[:3, 3] < np.asarray(UR5E.workspace_high)
    )


def test_the_panda_keeps_its_datasheet_kinematics():
    tcp = PANDA.forward_kinematics(PANDA.home_joints)[:3, 3]
    np.testing.assert_allclose(tcp, [0.3069, 0.0, 0.4866], atol=2e-3)  # "ready": 0.31 m out, 0.49 m up
    assert PANDA.num_joints == 7 and UR5E.num_joints == 6
    assert PANDA.state_dim == 22 and UR5E.state_dim == 20


def test_both_dh_conventions_agree_where_they_must():
    """A single revolute joint with only d: both conventions are Rz(q) Tz(d)."""
    row = DHRow(a=0.0, d=0.3, alpha=0.0)
    np.testing.assert_allclose(
        dh_link_transform(row, 0.4, MODIFIED_DH), dh_link_transform(row, 0.4, STANDARD_DH)
    )
    with pytest.raises(ValueError, match="DH convention must be one of"):
        dh_link_transform(row, 0.0, "craig")


def test_an_inconsistent_embodiment_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="'ur5e': home_joints has 5 values, the chain 6 joints"):
        dataclasses.replace(UR5E, home_joints=(0.0,) * 5)
    with pytest.raises(ValueError, match="home_joints lie outside the joint limits"):
        dataclasses.replace(UR5E, home_joints=(0.0, 0.0, 4.0, 0.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="6 joint values for 7 joints"):
        PANDA.forward_kinematics((0.0,) * 6)
    assert UR5E.within_joint_limits(UR5E.home_joints) and not UR5E.within_joint_limits(
        (0, 0, math.pi + 0.1, 0, 0, 0)
    )


def ur_spec():
    from protos.env_spec import CameraSpec, EnvSpec

    return EnvSpec(
        name="test/ur5e",
        cameras=(CameraSpec("front", 8, 8, 10.0),),
        state_fields=(StateField("joint_pos", 6), StateField("tcp_pos", 3), StateField("gripper_width", 1)),
        action=ee_delta_action_space(rotation=False),
        control_hz=10.0,
        instruction="test",
        max_episode_steps=10,
    )


def test_a_ur5e_is_held_to_its_own_box_not_the_pandas():
    """The UR5e's box ends at x = 0.75 m, the Panda's at 0.85 m: pushed outwards, a UR5e's targets
    stop at its own wall."""
    safety = SafetyFilter(ur_spec(), (ArmScaling(0.05, 0.3),), SafetyConfig(max_target_lead_m=1.0), UR5E)
    state = np.zeros(10, np.float32)
    state[6:9] = (0.70, 0.0, 0.3)  # near the box's +x wall (x <= 0.75)
    for _ in range(10):
        safe, _ = safety.limit(np.array([1.0, 0.0, 0.0, 1.0], np.float32), state, None)
        state[6] += safe[0] * 0.05
    assert state[6] <= UR5E.workspace_high[0] + 1e-6 < PANDA.workspace_high[0]
    assert state[6] > UR5E.workspace_high[0] - 0.02  # it moved up to the wall
    panda_box = SafetyConfig().for_embodiment(PANDA)
    assert panda_box.workspace_high != SafetyConfig().for_embodiment(UR5E).workspace_high


def test_a_robot_without_an_embodiment_must_name_its_box():
    with pytest.raises(ValueError, match=r"declares no embodiment.*set safety\.workspace_low"):
        SafetyFilter(ur_spec(), (ArmScaling(0.05, 0.3),), SafetyConfig())
    with pytest.raises(ValueError, match=r"set safety\.workspace_high"):
        SafetyConfig(workspace_low=(-1.0, -1.0, 0.0)).for_embodiment(None)
    boxed = SafetyConfig(workspace_low=(-1.0, -1.0, 0.0), workspace_high=(1.0, 1.0, 1.0)).for_embodiment(None)
    assert boxed.workspace_high == (1.0, 1.0, 1.0)
    # One corner set, the other from the arm's own box.
    mixed = SafetyConfig(workspace_high=(0.6, 0.2, 0.5)).for_embodiment(UR5E)
    assert mixed.workspace_low == UR5E.workspace_low and mixed.workspace_high == (0.6, 0.2, 0.5)
