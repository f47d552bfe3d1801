"""Homing an arm within the agent's limits: the joint motion is planned, checked and timed first.

Homing is a joint-space motion (a cosine blend from the current joints to ``home_joints``), so it
does not pass through the per-step safety filter. Before it runs, the TCP's path is computed with
the arm's forward kinematics: a path that leaves the workspace box is refused, and the duration is
stretched until neither the TCP nor any joint moves faster than its limit.

Kinematics: the arm's :class:`~protos.embodiment.Embodiment` (its published DH table), plus the
flange-to-TCP transform measured on the arm at the start, so an end effector configured on the
robot (Franka's Desk, UR's TCP setting) is honoured without being known here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from protos.embodiment import Embodiment

PEAK_SPEED_FACTOR = math.pi / 2  # the cosine blend's peak speed over its mean speed
PATH_SAMPLES = 200


def flange_pose(joints, embodiment: Embodiment) -> np.ndarray:
    """4x4 base-to-flange transform of ``embodiment`` at ``joints`` (radians)."""
    return embodiment.forward_kinematics(joints, tcp=False)


@dataclass(frozen=True)
class HomingLimits:
    """What homing must respect: the agent's box, and top speeds for the TCP and each joint."""

    workspace_low: tuple[float, float, float]
    workspace_high: tuple[float, float, float]
    max_tcp_speed_mps: float
    max_joint_speed_rads: float


@dataclass(frozen=True)
class HomingPlan:
    duration_s: float
    peak_tcp_speed_mps: float
    peak_joint_speed_rads: float
    tcp_path: np.ndarray  # [PATH_SAMPLES, 3]


class HomingRefused(ValueError):
    """The homing motion would break a limit; the message says where."""


def plan_homing(
    start_joints,
    start_tcp: np.ndarray,
    home_joints,
    min_duration_s: float,
    limits: HomingLimits,
    embodiment: Embodiment,
) -> HomingPlan:
    """Check the straight joint-space path to ``home_joints`` against ``limits`` and time it.

    ``start_tcp`` is the TCP pose the arm reports at ``start_joints`` (4x4); it fixes the flange-to-
    TCP transform. A start already outside the box may home if the path never goes further out.
    """
    start, goal = np.asarray(start_joints, float), np.asarray(home_joints, float)
    flange_to_tcp = np.linalg.inv(flange_pose(start, embodiment)) @ np.asarray(start_tcp, float)
    path = np.array(
        [
            (flange_pose(start + s * (goal - start), embodiment) @ flange_to_tcp)[:3, 3]
            for s in np.linspace(0, 1, PATH_SAMPLES)
        ]
    )
    low, high = np.asarray(limits.workspace_low), np.asarray(limits.workspace_high)
    outside = np.linalg.norm(np.maximum(0.0, np.maximum(low - path, path - high)), axis=1)
    allowed = outside[0] + 1e-4  # a TCP that starts outside may not go further out
    if outside.max() > allowed:
        worst = int(np.argmax(outside))
        raise HomingRefused(
            f"homing would take the TCP {1000 * outside[worst]:.0f} mm outside the workspace box, at "
            f"{np.round(path[worst], 3).tolist()} ({100 * worst // (PATH_SAMPLES - 1)}% of the way home); "
            "move the arm nearer home by hand (guiding mode) or change home_joints / the box"
        )
    tcp_per_unit = float(np.linalg.norm(np.diff(path, axis=0), axis=1).max() * (PATH_SAMPLES - 1))
    joint_per_unit = float(np.abs(goal - start).max())
    duration = max(
        min_duration_s,
        PEAK_SPEED_FACTOR * tcp_per_unit / limits.max_tcp_speed_mps,
        PEAK_SPEED_FACTOR * joint_per_unit / limits.max_joint_speed_rads,
    )
    return HomingPlan(
        duration_s=duration,
        peak_tcp_speed_mps=PEAK_SPEED_FACTOR * tcp_per_unit / duration,
        peak_joint_speed_rads=PEAK_SPEED_FACTOR * joint_per_unit / duration,
        tcp_path=path,
    )


__all__ = ["HomingLimits", "HomingPlan", "HomingRefused", "flange_pose", "plan_homing"]
