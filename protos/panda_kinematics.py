"""The Franka Panda's (and FR3's) kinematics from the modified (Craig) Denavit-Hartenberg table in
Franka's datasheet: one owner for the sim scene builder and the real arm's homing planner."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


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
