"""A low-poly Franka Emika Panda written as MJCF from its published kinematics (``SIM_ARM``).

The arm is generated from the modified (Craig) Denavit-Hartenberg table in Franka's datasheet, so
the kinematics are exact by construction; geometry is capsules along the kinematic skeleton plus a
box hand with two sliding fingers. All bodies use gravity compensation, as the real robot's
controller does.
"""

from __future__ import annotations

import math

import numpy as np

from protos.embodiment import DHRow
from protos.franka import (  # noqa: F401  (re-exported: the scene is built from them)
    FLANGE_D,
    HAND_TCP_Z,
    HOME_JOINTS,
    JOINT_LOWER,
    JOINT_UPPER,
    PANDA,
    PANDA_DH,
    forward_kinematics,
)
from sim_envs.sim_arm import CartesianGains, SimArm, fingers_xml, fmt, wrist_camera_xml

JOINT_TORQUE_LIMIT = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)
LINK_MASS = (4.97, 0.65, 3.23, 3.59, 1.23, 1.67, 0.74)
HAND_MASS = 0.73
FINGER_MASS = 0.015
FINGER_TRAVEL = 0.04  # each finger slides 0..4 cm: 8 cm maximum opening

HOME_QPOS = HOME_JOINTS  # the "ready" posture, from the Franka contract

# Joint servo gains (position actuators), strong on the shoulder, weaker on the wrist.
ARM_KP = (4500.0, 4500.0, 3500.0, 3500.0, 2000.0, 2000.0, 2000.0)
ARM_KV = (450.0, 450.0, 350.0, 350.0, 200.0, 200.0, 200.0)

# Cartesian impedance (stiffness, damping, force/torque limit), within what Franka's own
# Cartesian impedance controller accepts: up to 3000 N/m and 300 Nm/rad.
TRANSLATION_GAINS = CartesianGains(3000.0, 250.0, 150.0)
ROTATION_GAINS = CartesianGains(200.0, 15.0, 30.0)

ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 8))
FINGER_JOINTS = ("finger_joint1", "finger_joint2")
FINGER_PADS = ("left_pad", "right_pad")
FINGER_CLASSES = ("panda_finger", "panda_visual", "panda_black")
MATERIALS_XML = """<material name="panda_white" rgba="0.92 0.92 0.92 1"/>
    <material name="panda_black" rgba="0.15 0.15 0.15 1"/>"""


def _body_frame(row: DHRow) -> tuple[str, str]:
    """MJCF pos/quat of frame i in frame i-1 (the joint angle is applied by the hinge)."""
    pos = (row.a, -math.sin(row.alpha) * row.d, math.cos(row.alpha) * row.d)
    quat = (math.cos(row.alpha / 2), math.sin(row.alpha / 2), 0.0, 0.0)
    return fmt(pos), fmt(quat)


def _child_offset(i: int) -> tuple[float, float, float]:
    if i + 1 < len(PANDA_DH):
        row = PANDA_DH[i + 1]
        return (row.a, -math.sin(row.alpha) * row.d, math.cos(row.alpha) * row.d)
    return (0.0, 0.0, FLANGE_D)


_LINK_RADIUS = (0.06, 0.06, 0.055, 0.055, 0.05, 0.045, 0.04)


def panda_arm_xml(wrist_camera: str | None = None) -> str:
    """MJCF body tree of the arm and hand, to be placed inside <worldbody>."""
    arm_geom = 'class="panda_col" material="panda_white"'
    parts = [
        '<body name="link0" childclass="panda">',
        f'<geom name="link0_col" type="cylinder" size="0.07 0.07" pos="0 0 0.07" {arm_geom}/>',
    ]
    for i, row in enumerate(PANDA_DH):
        pos, quat = _body_frame(row)
        radius = _LINK_RADIUS[i]
        mass = LINK_MASS[i]
        inertia = 0.4 * mass * radius**2 + 0.01 * mass
        parts.append(f'<body name="link{i + 1}" pos="{pos}" quat="{quat}" gravcomp="1">')
        parts.append(f'<inertial pos="0 0 0" mass="{mass}" diaginertia="{fmt([inertia] * 3)}"/>')
        parts.append(
            f'<joint name="{ARM_JOINTS[i]}" range="{JOINT_LOWER[i]} {JOINT_UPPER[i]}" '
            f'springref="{HOME_QPOS[i]}" '
            f'actuatorfrcrange="{-JOINT_TORQUE_LIMIT[i]} {JOINT_TORQUE_LIMIT[i]}"/>'
        )
        # Joint housing along the rotation axis, then a segment towards the next joint.
        parts.append(
            f'<geom type="cylinder" size="{radius} {radius}" {arm_geom} name="link{i + 1}_housing"/>'
        )
        child = _child_offset(i)
        if np.linalg.norm(child) > 0.02:
            parts.append(
                f'<geom type="capsule" fromto="0 0 0 {fmt(child)}" size="{radius * 0.9}" '
                f'{arm_geom} name="link{i + 1}_col"/>'
            )
    parts.append(_hand_xml(wrist_camera))
    parts.extend(["</body>"] * (len(PANDA_DH) + 1))
    return "\n".join(parts)


def _hand_xml(wrist_camera: str | None = None) -> str:
    """The hand; ``wrist_camera`` replaces the default wrist camera element (a calibrated mount)."""
    # Hand frame = flange rotated -45 deg about z, as mounted on the real robot.
    quat = fmt((math.cos(-math.pi / 8), 0, 0, math.sin(-math.pi / 8)))
    return f"""
<body name="hand" pos="0 0 {FLANGE_D}" quat="{quat}" gravcomp="1">
  <inertial pos="0 0 0.03" mass="{HAND_MASS}" diaginertia="0.002 0.0004 0.002"/>
  <geom name="hand_col" type="box" size="0.025 0.09 0.03" pos="0 0 0.03" class="panda_col" material="panda_white"/>
  <geom name="hand_cam_mount" type="box" size="0.015 0.02 0.01" pos="0.05 0 0.02" class="panda_visual" material="panda_black"/>
  <site name="tcp" pos="0 0 {HAND_TCP_Z}" size="0.005" rgba="1 0 0 0"/>
  {wrist_camera or wrist_camera_xml()}
  {fingers_xml(FINGER_JOINTS, FINGER_PADS, 0.0584, FINGER_TRAVEL, FINGER_MASS, FINGER_CLASSES)}
</body>"""


def panda_defaults_xml() -> str:
    """<default> classes used by the arm (goes inside <default>)."""
    return """
<default class="panda">
  <joint armature="0.1" damping="2" stiffness="0.5"/>
  <default class="panda_col">
    <geom contype="2" conaffinity="0" group="1" density="0"/>
  </default>
  <default class="panda_visual">
    <geom contype="0" conaffinity="0" group="2" density="0"/>
  </default>
  <default class="panda_finger">
    <geom contype="2" conaffinity="1" condim="4" friction="1.5 0.02 0.001" solref="0.01 1"
          solimp="0.95 0.99 0.001" material="panda_black" density="0" priority="1"/>
  </default>
</default>"""


SIM_ARM = SimArm(
    embodiment=PANDA,
    id_prefix="Franka",
    spec_robot="franka",
    arm_joints=ARM_JOINTS,
    finger_joints=FINGER_JOINTS,
    finger_pads=FINGER_PADS,
    finger_travel_m=FINGER_TRAVEL,
    joint_kp=ARM_KP,
    joint_kv=ARM_KV,
    joint_torque_limit=JOINT_TORQUE_LIMIT,
    translation_gains=TRANSLATION_GAINS,
    rotation_gains=ROTATION_GAINS,
    body_xml=panda_arm_xml,
    defaults_xml=panda_defaults_xml(),
    materials_xml=MATERIALS_XML,
)
