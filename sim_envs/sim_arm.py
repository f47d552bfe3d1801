"""What the tabletop scene needs of an arm, and the MJCF that is the same for every arm.

An arm's model module (``panda_model``, ``ur5e_model``) writes its body tree and declares a
:class:`SimArm`; the scene, the env, the sim twin and calibration's rig take the arm by name
(``env.kwargs.robot``) through :func:`sim_arm`. The actuators (joint servos or the Cartesian
impedance controller), the parallel fingers and their coupling are built here from the arm's numbers.
A new arm is one model module plus its line in ``SIM_ARM_MODULES``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from protos.embodiment import Embodiment
from sim_envs.errors import EnvConfigError

# Arm name (``env.kwargs.robot``, an embodiment's ``sim_model``) -> the module that defines SIM_ARM.
SIM_ARM_MODULES = {
    "panda": "sim_envs.panda_model",
    "ur5e": "sim_envs.ur5e_model",
}


@dataclass(frozen=True)
class CartesianGains:
    """One half of a Cartesian impedance controller: stiffness, damping and force (torque) limit."""

    stiffness: float
    damping: float
    limit: float


@dataclass(frozen=True)
class SimArm:
    """An arm as the scene builds it: its embodiment, its MJCF names and its servo gains."""

    embodiment: Embodiment
    id_prefix: str  # the robot in env ids and specs: rlinf/<id_prefix><Task>-v0
    spec_robot: str  # the spec's metadata["robot"]
    arm_joints: tuple[str, ...]
    finger_joints: tuple[str, str]
    finger_pads: tuple[str, str]  # the geoms that touch what the gripper holds
    finger_travel_m: float  # each finger slides 0..this
    joint_kp: tuple[float, ...]  # joint position servos (joint_position action mode)
    joint_kv: tuple[float, ...]
    joint_torque_limit: tuple[float, ...]  # Nm
    translation_gains: CartesianGains  # the Cartesian impedance controller (ee_delta_pose action mode)
    rotation_gains: CartesianGains
    body_xml: Callable[[str | None], str]  # the body tree, given a wrist camera element (None: default)
    defaults_xml: str  # its <default> classes
    materials_xml: str  # its <material> assets

    @property
    def num_joints(self) -> int:
        return len(self.arm_joints)


def sim_arm(name: str) -> SimArm:
    """The arm called ``name``, or one line listing the arms the sim has."""
    if name not in SIM_ARM_MODULES:
        raise EnvConfigError(f"unknown robot {name!r}; the sim has {sorted(SIM_ARM_MODULES)}")
    return importlib.import_module(SIM_ARM_MODULES[name]).SIM_ARM


def fmt(values) -> str:
    return " ".join(f"{v:.6g}" for v in values)


def look_at_xyaxes(pos, target, up=(0.0, 0.0, 1.0)) -> str:
    """MJCF ``xyaxes`` for a camera at ``pos`` looking at ``target`` (MuJoCo cameras look along -z)."""
    forward = np.asarray(target, float) - np.asarray(pos, float)
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, np.asarray(up, float))
    right /= np.linalg.norm(right)
    cam_up = np.cross(right, forward)
    return fmt((*right, *cam_up))


def wrist_camera_xml(z: float = 0.03) -> str:
    """A camera on the gripper, 7 cm off its axis at ``z`` along it, looking down it past the fingertips."""
    pos = (0.07, 0.0, z)
    return (
        f'<camera name="wrist" pos="{fmt(pos)}" '
        f'xyaxes="{look_at_xyaxes(pos, (0, 0, z + 0.22), up=(-1, 0, 0))}" fovy="70"/>'
    )


def fingers_xml(joints: tuple[str, str], pads: tuple[str, str], base_z: float, travel: float, mass: float,
                classes: tuple[str, str, str]) -> str:  # fmt: skip
    """Two fingers sliding apart along the gripper's y axis from ``base_z``, pads 4.5 cm further on.
    ``classes``: the pads' default class, the knuckles' (visual) class and their material."""
    finger = f'class="{classes[0]}"'
    bodies = []
    for side, sign, joint, pad in (("left", 1, joints[0], pads[0]), ("right", -1, joints[1], pads[1])):
        bodies.append(f"""
  <body name="{side}_finger" pos="0 0 {base_z:.6g}" gravcomp="1">
    <inertial pos="0 {0.01 * sign:g} 0.04" mass="{mass}" diaginertia="1e-5 1e-5 1e-5"/>
    <joint name="{joint}" type="slide" axis="0 {sign} 0" range="0 {travel:.6g}" damping="5" armature="0.1"/>
    <geom name="{pad}" type="box" size="0.011 0.008 0.022" pos="0 {0.008 * sign:g} 0.045" {finger}/>
    <geom type="box" size="0.011 0.008 0.012" pos="0 {0.012 * sign:g} 0.012" class="{classes[1]}" material="{classes[2]}"/>
  </body>""")  # fmt: skip
    return "".join(bodies)


def actuators_xml(arm: SimArm, action_mode: str) -> str:
    """Arm actuators for the action mode, plus one coupled servo for the gripper.

    ``joint_position``: a position servo per joint. ``cartesian``: a Cartesian impedance
    controller built from six site-transmission actuators that pull the ``tcp`` site towards the
    ``tcp_target`` site (a mocap body); MuJoCo applies tau = J^T F inside every physics step.
    """
    emb, lines = arm.embodiment, []
    if action_mode == "joint_position":
        for i, name in enumerate(arm.arm_joints):
            kp, kv, torque = arm.joint_kp[i], arm.joint_kv[i], arm.joint_torque_limit[i]
            lines.append(
                f'<general name="act_{name}" joint="{name}" biastype="affine" gainprm="{kp}" '
                f'biasprm="0 {-kp} {-kv}" ctrlrange="{emb.joint_lower[i]} {emb.joint_upper[i]}" '
                f'forcerange="{-torque} {torque}"/>'
            )
    elif action_mode == "cartesian":
        for i, axis in enumerate(("x", "y", "z", "rx", "ry", "rz")):
            gear = ["0"] * 6
            gear[i] = "1"
            gains = arm.rotation_gains if i >= 3 else arm.translation_gains
            lines.append(
                f'<position name="act_tcp_{axis}" site="tcp" refsite="tcp_target" '
                f'gear="{" ".join(gear)}" kp="{gains.stiffness}" kv="{gains.damping}" ctrlrange="-1 1" '
                f'forcerange="{-gains.limit} {gains.limit}"/>'
            )
    else:
        raise ValueError(f"unknown action_mode {action_mode!r}")
    kp, force = 1500.0, emb.gripper.force_n
    lines.append(
        f'<general name="act_gripper" tendon="finger_split" biastype="affine" gainprm="{kp}" '
        f'biasprm="0 {-kp} -50" ctrlrange="0 {arm.finger_travel_m:g}" forcerange="{-force:g} {force:g}"/>'
    )
    return "\n".join(lines)


def tcp_target_xml() -> str:
    """The mocap frame the Cartesian controller tracks (goes inside <worldbody>)."""
    return (
        '<body name="tcp_target" mocap="true" pos="0.3 0 0.5">'
        '<site name="tcp_target" size="0.005" rgba="0 0 1 0"/></body>'
    )


def coupling_xml(arm: SimArm) -> str:
    """Tendon and equality that make the two fingers move together, as a parallel gripper's do."""
    left, right = arm.finger_joints
    return f"""
<tendon>
  <fixed name="finger_split">
    <joint joint="{left}" coef="0.5"/>
    <joint joint="{right}" coef="0.5"/>
  </fixed>
</tendon>
<equality>
  <joint joint1="{left}" joint2="{right}" solimp="0.95 0.99 0.001" solref="0.005 1"/>
</equality>"""


def arm_for_robot_type(robot_type: str) -> str | None:
    """The sim arm whose specs carry ``robot_type`` (a dataset's, e.g. ``franka``), or None."""
    for name in SIM_ARM_MODULES:
        if sim_arm(name).spec_robot == robot_type:
            return name
    return None
