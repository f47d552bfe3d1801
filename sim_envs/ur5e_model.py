"""A low-poly UR5e written as MJCF from UR's published (standard) Denavit-Hartenberg table, with a
parallel gripper on the flange (``SIM_ARM``); the kinematics are exact by construction (``protos.ur5e``).

Standard DH: frame i is frame i-1 moved by Rz(q_i) Tz(d_i) Tx(a_i) Rx(alpha_i). Each link is a body
whose hinge turns about its own z axis at its origin (the Rz(q_i)), and the next body sits at
(a_i, 0, d_i) turned by Rx(alpha_i). Geometry is capsules along the skeleton; masses are UR's
published link masses. All bodies use gravity compensation, as UR's controller does.
"""

from __future__ import annotations

import math

import numpy as np

from protos.embodiment import DHRow
from protos.ur5e import UR5E
from sim_envs.sim_arm import (
    CartesianGains,
    SimArm,
    actuators_xml,
    coupling_xml,
    fingers_xml,
    fmt,
    wrist_camera_xml,
)

ARM_JOINTS = (
    "shoulder_pan",
    "shoulder_lift",
    "elbow",
    "wrist_1",
    "wrist_2",
    "wrist_3",
)
FINGER_JOINTS = ("finger_left", "finger_right")
FINGER_PADS = ("left_pad", "right_pad")
FINGER_CLASSES = ("ur_finger", "ur_visual", "ur_black")
FINGER_MASS = 0.05
LINK_MASS = (3.761, 8.058, 2.846, 1.37, 1.3, 0.365)  # kg, UR's published UR5e link masses
JOINT_TORQUE_LIMIT = (150.0, 150.0, 150.0, 28.0, 28.0, 28.0)  # Nm, sizes 3 / 3 / 3 / 1 / 1 / 1
ARM_KP = (3000.0, 3000.0, 2000.0, 500.0, 500.0, 500.0)
ARM_KV = (300.0, 300.0, 200.0, 50.0, 50.0, 50.0)
# The Cartesian impedance of the tabletop tasks: as the Panda's, within the UR5e's torques.
TRANSLATION_GAINS = CartesianGains(3000.0, 250.0, 150.0)
ROTATION_GAINS = CartesianGains(200.0, 15.0, 30.0)
_LINK_RADIUS = (0.06, 0.055, 0.05, 0.04, 0.04, 0.035)
_BASE_TOP_Z = 0.08  # the base's cylinder stands 0..8 cm
FINGER_TRAVEL = UR5E.gripper.max_width_m / 2  # each finger
MATERIALS_XML = """<material name="ur_grey" rgba="0.75 0.78 0.8 1"/>
    <material name="ur_black" rgba="0.15 0.15 0.15 1"/>"""
DEFAULTS_XML = """
<default class="ur">
  <joint armature="0.1" damping="2"/>
  <default class="ur_col"><geom contype="2" conaffinity="0" group="1" density="0"/></default>
  <default class="ur_visual"><geom contype="0" conaffinity="0" group="2" density="0"/></default>
  <default class="ur_finger">
    <geom contype="2" conaffinity="1" condim="4" friction="1.5 0.02 0.001" solref="0.01 1"
          solimp="0.95 0.99 0.001" material="ur_black" density="0" priority="1"/>
  </default>
</default>"""


def _next_frame(row: DHRow) -> tuple[str, str]:
    """MJCF pos / quat of frame i (the next body) in body i: Tz(d) Tx(a) Rx(alpha)."""
    return fmt((row.a, 0.0, row.d)), fmt((math.cos(row.alpha / 2), math.sin(row.alpha / 2), 0.0, 0.0))


def ur5e_arm_xml(wrist_camera: str | None = None) -> str:
    """MJCF body tree of the arm and its gripper, to be placed inside <worldbody>; ``wrist_camera``
    replaces the default wrist camera element (a calibrated mount)."""
    geom = 'class="ur_col" material="ur_grey"'
    parts = [
        '<body name="ur_base" childclass="ur">',
        f'<geom type="cylinder" size="0.075 {_BASE_TOP_Z / 2:g}" pos="0 0 {_BASE_TOP_Z / 2:g}" {geom}/>',
    ]
    for i, row in enumerate(UR5E.dh):
        radius, mass = _LINK_RADIUS[i], LINK_MASS[i]
        inertia = 0.4 * mass * radius**2 + 0.01 * mass
        parts.append(f'<body name="ur_link{i + 1}" gravcomp="1">')
        parts.append(f'<inertial pos="0 0 0" mass="{mass}" diaginertia="{fmt([inertia] * 3)}"/>')
        parts.append(
            f'<joint name="{ARM_JOINTS[i]}" range="{UR5E.joint_lower[i]} {UR5E.joint_upper[i]}" '
            f'actuatorfrcrange="{-JOINT_TORQUE_LIMIT[i]} {JOINT_TORQUE_LIMIT[i]}"/>'
        )
        # The joint's housing; the shoulder's turns about the base's axis, so it sits on the base's
        # top rather than at the base frame (the table top), where it would rub on the table.
        housing_z = _BASE_TOP_Z + radius * 0.8 if i == 0 else 0.0
        parts.append(
            f'<geom type="cylinder" size="{radius} {radius * 0.8}" pos="0 0 {housing_z:.6g}" {geom}/>'
        )
        offset = np.array([row.a, 0.0, row.d])
        if np.linalg.norm(offset) > 0.02:
            parts.append(f'<geom type="capsule" fromto="0 0 0 {fmt(offset)}" size="{radius * 0.8}" {geom}/>')
        pos, quat = _next_frame(row)
        parts.append(f'<frame pos="{pos}" quat="{quat}">')
    parts.append(_gripper_xml(wrist_camera))
    parts.extend(["</frame></body>"] * len(UR5E.dh))
    parts.append("</body>")
    return "\n".join(parts)


def _gripper_xml(wrist_camera: str | None) -> str:
    """The flange (frame 6) with a parallel gripper; the ``tcp`` site between the fingertips."""
    tcp = UR5E.flange_tcp_m
    fingers = fingers_xml(FINGER_JOINTS, FINGER_PADS, tcp - 0.045, FINGER_TRAVEL, FINGER_MASS, FINGER_CLASSES)
    return f"""
<site name="flange" size="0.005" rgba="0 0 1 0"/>
<body name="gripper" gravcomp="1">
  <inertial pos="0 0 0.05" mass="0.9" diaginertia="0.002 0.002 0.001"/>
  <geom type="cylinder" size="0.04 0.04" pos="0 0 0.04" class="ur_col" material="ur_black"/>
  <geom type="box" size="0.025 0.045 0.02" pos="0 0 {tcp - 0.065:.6g}" class="ur_col" material="ur_black"/>
  <site name="tcp" pos="0 0 {tcp:.6g}" size="0.005" rgba="1 0 0 0"/>
  {wrist_camera or wrist_camera_xml(z=tcp - 0.06)}
  {fingers}
</body>"""


SIM_ARM = SimArm(
    embodiment=UR5E,
    id_prefix="UR5e",
    spec_robot="ur5e",
    arm_joints=ARM_JOINTS,
    finger_joints=FINGER_JOINTS,
    finger_pads=FINGER_PADS,
    finger_travel_m=FINGER_TRAVEL,
    joint_kp=ARM_KP,
    joint_kv=ARM_KV,
    joint_torque_limit=JOINT_TORQUE_LIMIT,
    translation_gains=TRANSLATION_GAINS,
    rotation_gains=ROTATION_GAINS,
    body_xml=ur5e_arm_xml,
    defaults_xml=DEFAULTS_XML,
    materials_xml=MATERIALS_XML,
)


def ur5e_model_xml() -> str:
    """The arm alone on a floor, a position servo per joint and one for the gripper."""
    return f"""<mujoco model="ur5e">
  <compiler angle="radian"/>
  <option timestep="0.002" integrator="implicitfast"/>
  <default>{DEFAULTS_XML}</default>
  <asset>
    {MATERIALS_XML}
  </asset>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1" rgba="0.9 0.9 0.9 1"/>
    {ur5e_arm_xml()}
  </worldbody>
  {coupling_xml(SIM_ARM)}
  <actuator>
    {actuators_xml(SIM_ARM, "joint_position")}
  </actuator>
</mujoco>"""
