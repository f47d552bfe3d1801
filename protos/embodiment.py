"""The robot as data: one frozen description of an arm that the sim, the sim twin, the real driver,
homing and the agent's safety defaults all read, so adding an arm is one instance of it.

An :class:`Embodiment` holds the arm's joint count and limits, its home pose, its kinematics (a
Denavit-Hartenberg chain in either convention), the flange -> TCP offset, its gripper, the state
fields a policy reads, the default workspace box of the TCP, how far a Cartesian target may lead
the TCP, the control modes its driver supports and the name of its sim model. Nothing heavy is
imported: the robot PC and the trainer share it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from protos.env_spec import StateField

MODIFIED_DH = "modified"  # Craig: Rx(alpha_{i-1}) Tx(a_{i-1}) Rz(q_i) Tz(d_i)  (Franka's datasheet)
STANDARD_DH = "standard"  # Denavit-Hartenberg: Rz(q_i) Tz(d_i) Tx(a_i) Rx(alpha_i)  (UR's published table)
DH_CONVENTIONS = (MODIFIED_DH, STANDARD_DH)


@dataclass(frozen=True)
class DHRow:
    """One row of a DH table (metres, radians); ``offset`` is added to the joint angle."""

    a: float
    d: float
    alpha: float
    offset: float = 0.0


def dh_link_transform(row: DHRow, q: float, convention: str = MODIFIED_DH) -> np.ndarray:
    """4x4 transform from frame i-1 to frame i for joint angle ``q``."""
    theta = q + row.offset
    ca, sa, cq, sq = math.cos(row.alpha), math.sin(row.alpha), math.cos(theta), math.sin(theta)
    if convention == MODIFIED_DH:
        return np.array(
            [
                [cq, -sq, 0.0, row.a],
                [sq * ca, cq * ca, -sa, -sa * row.d],
                [sq * sa, cq * sa, ca, ca * row.d],
                [0.0, 0.0, 0.0, 1.0],
            ]
        )
    if convention == STANDARD_DH:
        return np.array(
            [
                [cq, -sq * ca, sq * sa, row.a * cq],
                [sq, cq * ca, -cq * sa, row.a * sq],
                [0.0, sa, ca, row.d],
                [0.0, 0.0, 0.0, 1.0],
            ]
        )
    raise ValueError(f"DH convention must be one of {DH_CONVENTIONS}, got {convention!r}")


@dataclass(frozen=True)
class Gripper:
    """A parallel gripper: its full opening (m), continuous grasp force (N) and fingers."""

    name: str
    max_width_m: float
    force_n: float
    fingers: int = 2


@dataclass(frozen=True)
class Embodiment:
    """One arm, everything the stack needs to know about it. Lengths in metres, angles in radians."""

    name: str  # also the dataset's ``robot_type``
    dh: tuple[DHRow, ...]
    dh_convention: str
    joint_lower: tuple[float, ...]
    joint_upper: tuple[float, ...]
    joint_velocity_limit: tuple[float, ...]  # rad/s
    home_joints: tuple[float, ...]
    flange_tcp_m: float  # the TCP along the flange's z axis (between the fingertips)
    gripper: Gripper
    state_fields: tuple[StateField, ...]
    workspace_low: tuple[float, float, float]  # the TCP's default box (base frame)
    workspace_high: tuple[float, float, float]
    target_lead_m: float  # per axis: a Cartesian controller's target never runs further ahead of the TCP
    control_modes: tuple[str, ...]  # what its real driver can run, e.g. "cartesian_impedance", "servo_l"
    sim_model: str  # the sim_envs model that builds it
    flange_d: float = 0.0  # a fixed offset from the last DH frame to the flange along its z axis

    def __post_init__(self) -> None:
        n = len(self.dh)
        for name in ("joint_lower", "joint_upper", "joint_velocity_limit", "home_joints"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"embodiment {self.name!r}: {name} has {len(getattr(self, name))} values, the chain {n} joints"
                )
        if self.dh_convention not in DH_CONVENTIONS:
            raise ValueError(f"embodiment {self.name!r}: dh_convention must be one of {DH_CONVENTIONS}")
        if not all(lo < hi for lo, hi in zip(self.joint_lower, self.joint_upper)):
            raise ValueError(f"embodiment {self.name!r}: every joint_lower must be below its joint_upper")
        if not all(lo <= q <= hi for lo, q, hi in zip(self.joint_lower, self.home_joints, self.joint_upper)):
            raise ValueError(f"embodiment {self.name!r}: home_joints lie outside the joint limits")
        if not all(lo < hi for lo, hi in zip(self.workspace_low, self.workspace_high)):
            raise ValueError(f"embodiment {self.name!r}: the workspace's lows must be below its highs")

    @property
    def num_joints(self) -> int:
        return len(self.dh)

    @property
    def state_dim(self) -> int:
        return sum(f.size for f in self.state_fields)

    def forward_kinematics(self, qpos, tcp: bool = True) -> np.ndarray:
        """Analytic FK of the flange (or the TCP) in the base frame, from the DH chain."""
        if len(qpos) != self.num_joints:
            raise ValueError(f"{self.name}: {len(qpos)} joint values for {self.num_joints} joints")
        transform = np.eye(4)
        for row, q in zip(self.dh, qpos):
            transform = transform @ dh_link_transform(row, float(q), self.dh_convention)
        along_z = self.flange_d + (self.flange_tcp_m if tcp else 0.0)
        if along_z:
            transform = transform @ _translation_z(along_z)
        return transform

    def within_joint_limits(self, qpos) -> bool:
        q = np.asarray(qpos, dtype=np.float64)
        return bool(np.all(q >= np.asarray(self.joint_lower)) and np.all(q <= np.asarray(self.joint_upper)))


def _translation_z(d: float) -> np.ndarray:
    transform = np.eye(4)
    transform[2, 3] = d
    return transform
