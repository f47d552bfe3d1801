"""The Universal Robots UR5e as an :class:`~protos.embodiment.Embodiment`, from UR's published
kinematics (the standard Denavit-Hartenberg table UR gives for the e-series) and the joint limits
of its ROS description, with a Robotiq 2F-85 parallel gripper on the flange.

At all-zero joints the arm lies stretched along the base's -x axis: the flange at
(-0.8172, -0.2329, 0.0628) m, as UR's table gives. The home pose below turns the shoulder half a
turn, so the arm works along +x, the side where the tabletop scene (and the Panda's workspace) is:
the TCP about 0.49 m in front of the base and 0.34 m up, pointing down. The default workspace box is
around it, kept 0.25 m clear of the base's axis. A cell laid out otherwise sets ``home_joints`` and
``[safety]``'s box for itself.
"""

from __future__ import annotations

import math

from protos.embodiment import STANDARD_DH, DHRow, Embodiment, Gripper
from protos.env_spec import StateField

UR5E_DH: tuple[DHRow, ...] = (
    DHRow(a=0.0, d=0.1625, alpha=math.pi / 2),
    DHRow(a=-0.425, d=0.0, alpha=0.0),
    DHRow(a=-0.3922, d=0.0, alpha=0.0),
    DHRow(a=0.0, d=0.1333, alpha=math.pi / 2),
    DHRow(a=0.0, d=0.0997, alpha=-math.pi / 2),
    DHRow(a=0.0, d=0.0996, alpha=0.0),
)
STATE_FIELDS = (
    StateField("joint_pos", 6),
    StateField("joint_vel", 6),
    StateField("tcp_pos", 3),
    StateField("tcp_quat", 4),  # (w, x, y, z)
    StateField("gripper_width", 1),  # per finger, metres
)
HOME_JOINTS = (math.pi, -math.pi / 2, math.pi / 2, -math.pi / 2, -math.pi / 2, 0.0)
TWO_PI = 2 * math.pi
# ±360° on every joint but the elbow, which its description limits to ±180° (the arm's own links).
JOINT_LOWER = (-TWO_PI, -TWO_PI, -math.pi, -TWO_PI, -TWO_PI, -TWO_PI)
JOINT_UPPER = (TWO_PI, TWO_PI, math.pi, TWO_PI, TWO_PI, TWO_PI)
JOINT_VELOCITY_LIMIT = (math.pi,) * 6  # 180 °/s on every joint
ROBOTIQ_2F85_TCP_M = 0.15  # fingertip centre beyond the flange (with its coupling); measure your own

UR5E = Embodiment(
    name="ur5e",
    dh=UR5E_DH,
    dh_convention=STANDARD_DH,
    joint_lower=JOINT_LOWER,
    joint_upper=JOINT_UPPER,
    joint_velocity_limit=JOINT_VELOCITY_LIMIT,
    home_joints=HOME_JOINTS,
    flange_tcp_m=ROBOTIQ_2F85_TCP_M,
    gripper=Gripper("robotiq_2f85", max_width_m=0.085, force_n=100.0),
    state_fields=STATE_FIELDS,
    workspace_low=(0.25, -0.45, 0.02),
    workspace_high=(0.75, 0.45, 0.6),
    target_lead_m=0.1,
    control_modes=("servo_l", "speed_l"),  # ur_rtde's RTDEControlInterface
    sim_model="ur5e",
)
