"""The Franka Emika Panda (and the FR3, which shares its kinematics) as an
:class:`~protos.embodiment.Embodiment`: one owner for the sim, the sim twin, the real driver and
the agent's safety defaults.

- its proprioception layout (the state fields a policy reads, the same in sim and on the robot);
- its home posture and the default workspace box of the TCP;
- how far a Cartesian controller's target may lead the TCP;
- its kinematics, from the modified (Craig) Denavit-Hartenberg table in Franka's datasheet, and its
  joint limits from the same datasheet.
"""

from __future__ import annotations

import math

import numpy as np

from protos.embodiment import MODIFIED_DH, DHRow, Embodiment, Gripper
from protos.env_spec import StateField

STATE_FIELDS = (
    StateField("joint_pos", 7),
    StateField("joint_vel", 7),
    StateField("tcp_pos", 3),
    StateField("tcp_quat", 4),  # (w, x, y, z)
    StateField("gripper_width", 1),  # per finger, metres
)
# The usual "ready" posture: TCP about 0.31 m in front of the base, 0.49 m up, pointing down.
HOME_JOINTS = (0.0, -math.pi / 4, 0.0, -3 * math.pi / 4, 0.0, math.pi / 2, math.pi / 4)
# The TCP's box (base frame, metres); z_min keeps the finger pads off the table.
WORKSPACE_LOW = (0.2, -0.45, 0.025)
WORKSPACE_HIGH = (0.85, 0.45, 0.6)
TARGET_LEAD_M = 0.1  # per axis: a Cartesian controller's target never runs further ahead of the TCP

# Franka Emika Panda, modified DH convention (joint i rotates about the z axis of frame i).
PANDA_DH: tuple[DHRow, ...] = (
    DHRow(0.0, 0.333, 0.0),
    DHRow(0.0, 0.0, -math.pi / 2),
    DHRow(0.0, 0.316, math.pi / 2),
    DHRow(0.0825, 0.0, math.pi / 2),
    DHRow(-0.0825, 0.384, -math.pi / 2),
    DHRow(0.0, 0.0, math.pi / 2),
    DHRow(0.088, 0.0, math.pi / 2),
)
FLANGE_D = 0.107  # flange offset along joint 7's axis
HAND_TCP_Z = 0.1034  # tool centre point below the flange (between the fingertips)
JOINT_LOWER = (-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973)
JOINT_UPPER = (2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973)
JOINT_VELOCITY_LIMIT = (2.175, 2.175, 2.175, 2.175, 2.61, 2.61, 2.61)

PANDA = Embodiment(
    name="franka_panda",
    dh=PANDA_DH,
    dh_convention=MODIFIED_DH,
    joint_lower=JOINT_LOWER,
    joint_upper=JOINT_UPPER,
    joint_velocity_limit=JOINT_VELOCITY_LIMIT,
    home_joints=HOME_JOINTS,
    flange_d=FLANGE_D,
    flange_tcp_m=HAND_TCP_Z,
    gripper=Gripper("franka_hand", max_width_m=0.08, force_n=70.0),
    state_fields=STATE_FIELDS,
    workspace_low=WORKSPACE_LOW,
    workspace_high=WORKSPACE_HIGH,
    target_lead_m=TARGET_LEAD_M,
    control_modes=("cartesian_impedance",),
    sim_model="panda",
)


def forward_kinematics(qpos: np.ndarray | tuple[float, ...], tcp: bool = True) -> np.ndarray:
    """Analytic FK of the Panda's flange (or TCP) in the base frame, straight from the DH table."""
    return PANDA.forward_kinematics(qpos, tcp)
