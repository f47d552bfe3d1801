"""A low-poly UR5e written as MJCF from UR's published (standard) Denavit-Hartenberg table, with a
parallel gripper on the flange; the kinematics are exact by construction (``protos.ur5e``).

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

ARM_JOINTS = (
    "shoulder_pan",
    "shoulder_lift",
    "elbow",
    "wrist_1",
    "wrist_2",
    "wrist_3",
)
FINGER_JOINTS = ("finger_left", "finger_right")
LINK_MASS = (3.761, 8.058, 2.846, 1.37, 1.3, 0.365)  # kg, UR's published UR5e link masses
JOINT_TORQUE_LIMIT = (150.0, 150.0, 150.0, 28.0, 28.0, 28.0)  # Nm, sizes 3 / 3 / 3 / 1 / 1 / 1
ARM_KP = (3000.0, 3000.0, 2000.0, 500.0, 500.0, 500.0)
ARM_KV = (300.0, 300.0, 200.0, 50.0, 50.0, 50.0)
_LINK_RADIUS = (0.06, 0.055, 0.05, 0.04, 0.04, 0.035)
FINGER_TRAVEL = UR5E.gripper.max_width_m / 2  # each finger


def _fmt(values) -> str:
    return " ".join(f"{v:.6g}" for v in values)


def _next_frame(row: DHRow) -> tuple[str, str]:
    """MJCF pos / quat of frame i (the next body) in body i: Tz(d) Tx(a) Rx(alpha)."""
    return _fmt((row.a, 0.0, row.d)), _fmt((math.cos(row.alpha / 2), math.sin(row.alpha / 2), 0.0, 0.0))


def ur5e_arm_xml() -> str:
    """MJCF body tree of the arm and its gripper, to be placed inside <worldbody>."""
    geom = 'class="ur_col" material="ur_grey"'
    parts = [
        '<body name="ur_base" childclass="ur">',
        f'<geom type="cylinder" size="0.075 0.04" pos="0 0 0.04" {geom}/>',
    ]
    for i, row in enumerate(UR5E.dh):
        radius, mass = _LINK_RADIUS[i], LINK_MASS[i]
        inertia = 0.4 * mass * radius**2 + 0.01 * mass
        parts.append(f'<body name="ur_link{i + 1}" gravcomp="1">')
        parts.append(f'<inertial pos="0 0 0" mass="{mass}" diaginertia="{_fmt([inertia] * 3)}"/>')
        parts.append(
            f'<joint name="{ARM_JOINTS[i]}" range="{UR5E.joint_lower[i]} {UR5E.joint_upper[i]}" '
            f'actuatorfrcrange="{-JOINT_TORQUE_LIMIT[i]} {JOINT_TORQUE_LIMIT[i]}"/>'
        )
        parts.append(f'<geom type="cylinder" size="{radius} {radius * 0.8}" {geom}/>')
        offset = np.array([row.a, 0.0, row.d])
        if np.linalg.norm(offset) > 0.02:
            parts.append(f'<geom type="capsule" fromto="0 0 0 {_fmt(offset)}" size="{radius * 0.8}" {geom}/>')
        pos, quat = _next_frame(row)
        parts.append(f'<frame pos="{pos}" quat="{quat}">')
    parts.append(_gripper_xml())
    parts.extend(["</frame></body>"] * len(UR5E.dh))
    parts.append("</body>")
    return "\n".join(parts)


def _gripper_xml() -> str:
    """The flange (frame 6) with a parallel gripper; the ``tcp`` site between the fingertips."""
    finger = 'class="ur_finger"'
    tcp = UR5E.flange_tcp_m
    return f"""
<site name="flange" size="0.005" rgba="0 0 1 0"/>
<body name="gripper" gravcomp="1">
  <inertial pos="0 0 0.05" mass="0.9" diaginertia="0.002 0.002 0.001"/>
  <geom type="cylinder" size="0.04 0.04" pos="0 0 0.04" class="ur_col" material="ur_black"/>
  <site name="tcp" pos="0 0 {tcp:.6g}" size="0.005" rgba="1 0 0 0"/>
  <body name="finger_left_body" pos="0 0 {tcp - 0.03:.6g}" gravcomp="1">
    <inertial pos="0 0.01 0.02" mass="0.05" diaginertia="1e-5 1e-5 1e-5"/>
    <joint name="{FINGER_JOINTS[0]}" type="slide" axis="0 1 0" range="0 {FINGER_TRAVEL:.6g}" damping="5" armature="0.1"/>
    <geom type="box" size="0.011 0.008 0.022" pos="0 0.008 0.03" {finger}/>
  </body>
  <body name="finger_right_body" pos="0 0 {tcp - 0.03:.6g}" gravcomp="1">
    <inertial pos="0 -0.01 0.02" mass="0.05" diaginertia="1e-5 1e-5 1e-5"/>
    <joint name="{FINGER_JOINTS[1]}" type="slide" axis="0 -1 0" range="0 {FINGER_TRAVEL:.6g}" damping="5" armature="0.1"/>
    <geom type="box" size="0.011 0.008 0.022" pos="0 -0.008 0.03" {finger}/>
  </body>
</body>"""


def ur5e_model_xml() -> str:
    """A complete scene: the arm on the floor, a position servo per joint and one for the gripper."""
    actuators = [
        f'<general name="act_{name}" joint="{name}" biastype="affine" gainprm="{ARM_KP[i]}" '
        f'biasprm="0 {-ARM_KP[i]} {-ARM_KV[i]}" ctrlrange="{UR5E.joint_lower[i]} {UR5E.joint_upper[i]}" '
        f'forcerange="{-JOINT_TORQUE_LIMIT[i]} {JOINT_TORQUE_LIMIT[i]}"/>'
        for i, name in enumerate(ARM_JOINTS)
    ]
    actuators.append(
        f'<general name="act_gripper" tendon="finger_split" biastype="affine" gainprm="1500" '
        f'biasprm="0 -1500 -50" ctrlrange="0 {FINGER_TRAVEL:.6g}" forcerange="-{UR5E.gripper.force_n} {UR5E.gripper.force_n}"/>'
    )
    return f"""<mujoco model="ur5e">
  <compiler angle="radian"/>
  <option timestep="0.002" integrator="implicitfast"/>
  <default>
    <default class="ur">
      <joint armature="0.1" damping="2"/>
      <default class="ur_col"><geom contype="2" conaffinity="0" group="1" density="0"/></default>
      <default class="ur_finger">
        <geom contype="2" conaffinity="1" condim="4" friction="1.5 0.02 0.001" material="ur_black" density="0"/>
      </default>
    </default>
  </default>
  <asset>
    <material name="ur_grey" rgba="0.75 0.78 0.8 1"/>
    <material name="ur_black" rgba="0.15 0.15 0.15 1"/>
  </asset>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1" rgba="0.9 0.9 0.9 1"/>
    {ur5e_arm_xml()}
  </worldbody>
  <tendon>
    <fixed name="finger_split">
      <joint joint="{FINGER_JOINTS[0]}" coef="0.5"/>
      <joint joint="{FINGER_JOINTS[1]}" coef="0.5"/>
    </fixed>
  </tendon>
  <equality>
    <joint joint1="{FINGER_JOINTS[0]}" joint2="{FINGER_JOINTS[1]}" polycoef="0 1 0 0 0"/>
  </equality>
  <actuator>
    {chr(10).join(actuators)}
  </actuator>
</mujoco>"""
