"""A low-poly Franka Emika Panda written as MJCF from its published kinematics.

The arm is generated from the modified (Craig) Denavit-Hartenberg table in Franka's datasheet, so
the kinematics are exact by construction; geometry is capsules along the kinematic skeleton plus a
box hand with two sliding fingers. All bodies use gravity compensation, as the real robot's
controller does.
"""

from __future__ import annotations

import math

import numpy as np

from protos.embodiment import DHRow, dh_link_transform  # noqa: F401  (re-exported: the scene is built from them)
from protos.franka import (  # noqa: F401  (re-exported: the scene is built from them)
    FLANGE_D,
    HAND_TCP_Z,
    HOME_JOINTS,
    JOINT_LOWER,
    JOINT_UPPER,
    JOINT_VELOCITY_LIMIT,
    PANDA_DH,
    forward_kinematics,
)

JOINT_TORQUE_LIMIT = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)
LINK_MASS = (4.97, 0.65, 3.23, 3.59, 1.23, 1.67, 0.74)
HAND_MASS = 0.73
FINGER_MASS = 0.015
FINGER_TRAVEL = 0.04  # each finger slides 0..4 cm: 8 cm maximum opening
GRIPPER_FORCE = 70.0  # N, continuous grasp force of the Franka Hand

HOME_QPOS = HOME_JOINTS  # the "ready" posture, from the Franka contract

# Joint servo gains (position actuators), strong on the shoulder, weaker on the wrist.
ARM_KP = (4500.0, 4500.0, 3500.0, 3500.0, 2000.0, 2000.0, 2000.0)
ARM_KV = (450.0, 450.0, 350.0, 350.0, 200.0, 200.0, 200.0)

# Cartesian impedance (stiffness, damping, force/torque limit), within what Franka's own
# Cartesian impedance controller accepts: up to 3000 N/m and 300 Nm/rad.
CARTESIAN_GAINS = {"translation": (3000.0, 250.0, 150.0), "rotation": (200.0, 15.0, 30.0)}

ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 8))
FINGER_JOINTS = ("finger_joint1", "finger_joint2")


def _fmt(values) -> str:
    return " ".join(f"{v:.6g}" for v in values)


def _body_frame(row: DHRow) -> tuple[str, str]:
    """MJCF pos/quat of frame i in frame i-1 (the joint angle is applied by the hinge)."""
    pos = (row.a, -math.sin(row.alpha) * row.d, math.cos(row.alpha) * row.d)
    quat = (math.cos(row.alpha / 2), math.sin(row.alpha / 2), 0.0, 0.0)
    return _fmt(pos), _fmt(quat)


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
        parts.append(f'<inertial pos="0 0 0" mass="{mass}" diaginertia="{_fmt([inertia] * 3)}"/>')
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
                f'<geom type="capsule" fromto="0 0 0 {_fmt(child)}" size="{radius * 0.9}" '
                f'{arm_geom} name="link{i + 1}_col"/>'
            )
    parts.append(_hand_xml(wrist_camera))
    parts.extend(["</body>"] * (len(PANDA_DH) + 1))
    return "\n".join(parts)


def look_at_xyaxes(pos, target, up=(0.0, 0.0, 1.0)) -> str:
    """MJCF ``xyaxes`` for a camera at ``pos`` looking at ``target`` (MuJoCo cameras look along -z)."""
    forward = np.asarray(target, float) - np.asarray(pos, float)
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, np.asarray(up, float))
    right /= np.linalg.norm(right)
    cam_up = np.cross(right, forward)
    return _fmt((*right, *cam_up))


WRIST_CAMERA_XML = (
    f'<camera name="wrist" pos="0.07 0 0.03" '
    f'xyaxes="{look_at_xyaxes((0.07, 0, 0.03), (0, 0, 0.25), up=(-1, 0, 0))}" fovy="70"/>'
)


def _hand_xml(wrist_camera: str | None = None) -> str:
    """The hand; ``wrist_camera`` replaces the default wrist camera element (a calibrated mount)."""
    # Hand frame = flange rotated -45 deg about z, as mounted on the real robot.
    quat = _fmt((math.cos(-math.pi / 8), 0, 0, math.sin(-math.pi / 8)))
    finger = 'class="panda_finger"'
    return f"""
<body name="hand" pos="0 0 {FLANGE_D}" quat="{quat}" gravcomp="1">
  <inertial pos="0 0 0.03" mass="{HAND_MASS}" diaginertia="0.002 0.0004 0.002"/>
  <geom name="hand_col" type="box" size="0.025 0.09 0.03" pos="0 0 0.03" class="panda_col" material="panda_white"/>
  <geom name="hand_cam_mount" type="box" size="0.015 0.02 0.01" pos="0.05 0 0.02" class="panda_visual" material="panda_black"/>
  <site name="tcp" pos="0 0 {HAND_TCP_Z}" size="0.005" rgba="1 0 0 0"/>
  {wrist_camera or WRIST_CAMERA_XML}
  <body name="left_finger" pos="0 0 0.0584" gravcomp="1">
    <inertial pos="0 0.01 0.04" mass="{FINGER_MASS}" diaginertia="1e-5 1e-5 1e-5"/>
    <joint name="{FINGER_JOINTS[0]}" type="slide" axis="0 1 0" range="0 {FINGER_TRAVEL}" damping="5" armature="0.1"/>
    <geom name="left_pad" type="box" size="0.011 0.008 0.022" pos="0 0.008 0.045" {finger}/>
    <geom type="box" size="0.011 0.008 0.012" pos="0 0.012 0.012" class="panda_visual" material="panda_black"/>
  </body>
  <body name="right_finger" pos="0 0 0.0584" gravcomp="1">
    <inertial pos="0 -0.01 0.04" mass="{FINGER_MASS}" diaginertia="1e-5 1e-5 1e-5"/>
    <joint name="{FINGER_JOINTS[1]}" type="slide" axis="0 -1 0" range="0 {FINGER_TRAVEL}" damping="5" armature="0.1"/>
    <geom name="right_pad" type="box" size="0.011 0.008 0.022" pos="0 -0.008 0.045" {finger}/>
    <geom type="box" size="0.011 0.008 0.012" pos="0 -0.012 0.012" class="panda_visual" material="panda_black"/>
  </body>
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


def panda_actuators_xml(action_mode: str) -> str:
    """Arm actuators for the action mode, plus one coupled servo for the gripper.

    ``joint_position``: a position servo per joint. ``cartesian``: a Cartesian impedance
    controller built from six site-transmission actuators that pull the ``tcp`` site towards the
    ``tcp_target`` site (a mocap body); MuJoCo applies tau = J^T F inside every physics step.
    """
    lines = []
    if action_mode == "joint_position":
        for i, name in enumerate(ARM_JOINTS):
            kp, kv = ARM_KP[i], ARM_KV[i]
            lines.append(
                f'<general name="act_{name}" joint="{name}" biastype="affine" gainprm="{kp}" '
                f'biasprm="0 {-kp} {-kv}" ctrlrange="{JOINT_LOWER[i]} {JOINT_UPPER[i]}" '
                f'forcerange="{-JOINT_TORQUE_LIMIT[i]} {JOINT_TORQUE_LIMIT[i]}"/>'
            )
    elif action_mode == "cartesian":
        axes = ("x", "y", "z", "rx", "ry", "rz")
        for i, axis in enumerate(axes):
            gear = ["0"] * 6
            gear[i] = "1"
            kp, kv, limit = CARTESIAN_GAINS["rotation" if i >= 3 else "translation"]
            lines.append(
                f'<position name="act_tcp_{axis}" site="tcp" refsite="tcp_target" '
                f'gear="{" ".join(gear)}" kp="{kp}" kv="{kv}" ctrlrange="-1 1" '
                f'forcerange="{-limit} {limit}"/>'
            )
    else:
        raise ValueError(f"unknown action_mode {action_mode!r}")
    kp = 1500.0
    lines.append(
        f'<general name="act_gripper" tendon="finger_split" biastype="affine" gainprm="{kp}" '
        f'biasprm="0 {-kp} -50" ctrlrange="0 {FINGER_TRAVEL}" '
        f'forcerange="{-GRIPPER_FORCE} {GRIPPER_FORCE}"/>'
    )
    return "\n".join(lines)


def tcp_target_xml() -> str:
    """The mocap frame the Cartesian controller tracks (goes inside <worldbody>)."""
    return (
        '<body name="tcp_target" mocap="true" pos="0.3 0 0.5">'
        '<site name="tcp_target" size="0.005" rgba="0 0 1 0"/></body>'
    )


def panda_coupling_xml() -> str:
    """Tendon and equality that make the two fingers move together, like the Franka Hand."""
    return f"""
<tendon>
  <fixed name="finger_split">
    <joint joint="{FINGER_JOINTS[0]}" coef="0.5"/>
    <joint joint="{FINGER_JOINTS[1]}" coef="0.5"/>
  </fixed>
</tendon>
<equality>
  <joint joint1="{FINGER_JOINTS[0]}" joint2="{FINGER_JOINTS[1]}" solimp="0.95 0.99 0.001" solref="0.005 1"/>
</equality>"""
