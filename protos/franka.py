"""The Franka arm as every part of the stack sees it: one owner for the sim, the sim twin, the real
driver and the agent's safety defaults.

- its proprioception layout (the state fields a policy reads, the same in sim and on the robot);
- its home posture and the default workspace box of the TCP;
- how far a Cartesian controller's target may lead the TCP;
- its kinematics, from the modified (Craig) Denavit-Hartenberg table in Franka's datasheet (the FR3
  uses the same).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

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


def cap_norm(vector: np.ndarray, max_norm: float) -> np.ndarray:
    """``vector`` scaled down to length ``max_norm`` if it is longer (direction kept): how the agent's
    safety limits a step, and how the sim applies the same limits (``max_step_translation_m``)."""
    norm = float(np.linalg.norm(vector))
    return vector * (max_norm / norm) if norm > max_norm else vector


def shorten_into_ball(offset: np.ndarray, step: np.ndarray, radius: float) -> np.ndarray:
    """The longest part ``t * step`` (0 <= t <= 1) that keeps ``offset + t * step`` within ``radius``
    of the origin; if ``offset`` is already outside, the step that brings it back onto the sphere.
    How a commanded target is kept within its lead of the measured TCP (``offset``: target - TCP)."""
    if float(np.linalg.norm(offset)) > radius:
        return cap_norm(offset, radius) - offset
    a, b, c = float(step @ step), 2.0 * float(offset @ step), float(offset @ offset) - radius**2
    if a == 0.0 or a + b + c <= 0.0:  # no step, or its end is inside
        return step
    t = (-b + np.sqrt(max(b * b - 4 * a * c, 0.0))) / (2 * a)
    return step * min(1.0, max(0.0, t))


@dataclass(frozen=True)
class DHRow:
    """One row of the modified DH table: a_{i-1}, d_i, alpha_{i-1} (metres, radians)."""

    a: float
    d: float
    alpha: float


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


def dh_link_transform(row: DHRow, q: float) -> np.ndarray:
    """4x4 transform from frame i-1 to frame i: Rx(alpha) Tx(a) Rz(q) Tz(d)."""
    ca, sa, cq, sq = math.cos(row.alpha), math.sin(row.alpha), math.cos(q), math.sin(q)
    return np.array(
        [
            [cq, -sq, 0.0, row.a],
            [sq * ca, cq * ca, -sa, -sa * row.d],
            [sq * sa, cq * sa, ca, ca * row.d],
            [0.0, 0.0, 0.0, 1.0],
        ]
    )


def forward_kinematics(qpos: np.ndarray | tuple[float, ...], tcp: bool = True) -> np.ndarray:
    """Analytic FK of the flange (or TCP) in the base frame, straight from the DH table."""
    transform = np.eye(4)
    for row, q in zip(PANDA_DH, qpos):
        transform = transform @ dh_link_transform(row, float(q))
    transform = transform @ dh_link_transform(DHRow(0.0, FLANGE_D, 0.0), 0.0)
    if tcp:
        transform = transform @ dh_link_transform(DHRow(0.0, HAND_TCP_Z, 0.0), 0.0)
    return transform
