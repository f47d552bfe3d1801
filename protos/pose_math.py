"""Small rigid-transform helpers in numpy (the robot PC has no scipy), shared by the agent and the sim."""

from __future__ import annotations

import numpy as np


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


def rotvec_to_matrix(rotvec: np.ndarray) -> np.ndarray:
    """Rodrigues: axis-angle vector -> 3x3 rotation matrix."""
    angle = float(np.linalg.norm(rotvec))
    if angle < 1e-12:
        return np.eye(3)
    k = np.asarray(rotvec, dtype=np.float64) / angle
    skew = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(angle) * skew + (1 - np.cos(angle)) * skew @ skew


def matrix_to_rotvec(rotation: np.ndarray) -> np.ndarray:
    """3x3 rotation matrix -> axis-angle vector (angle in [0, pi])."""
    cos = np.clip((np.trace(rotation) - 1.0) / 2.0, -1.0, 1.0)
    angle = float(np.arccos(cos))
    if angle < 1e-9:
        return np.zeros(3)
    if np.pi - angle < 1e-6:  # near pi the antisymmetric part vanishes: take the axis from R + I
        column = np.argmax(np.diag(rotation))
        axis = (rotation[:, column] + np.eye(3)[:, column]) / np.sqrt(2.0 * (1.0 + rotation[column, column]))
        return axis * angle
    axis = np.array(
        [rotation[2, 1] - rotation[1, 2], rotation[0, 2] - rotation[2, 0], rotation[1, 0] - rotation[0, 1]]
    ) / (2.0 * np.sin(angle))
    return axis * angle


def matrix_to_quat(rotation: np.ndarray) -> np.ndarray:
    """3x3 rotation matrix -> unit quaternion (w, x, y, z) with w >= 0, as MuJoCo reports it."""
    rotvec = matrix_to_rotvec(rotation)
    angle = float(np.linalg.norm(rotvec))
    if angle < 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0])
    quat = np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * rotvec / angle])
    return quat if quat[0] >= 0 else -quat


def quat_to_matrix(quat: np.ndarray) -> np.ndarray:
    """Quaternion (w, x, y, z), normalised here -> 3x3 rotation matrix."""
    w, x, y, z = np.asarray(quat, dtype=np.float64) / np.linalg.norm(quat)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def limit_rotation(rotation: np.ndarray, reference: np.ndarray, max_angle: float) -> np.ndarray:
    """``rotation`` turned back toward ``reference`` until they differ by at most ``max_angle``."""
    error = matrix_to_rotvec(rotation @ reference.T)
    angle = float(np.linalg.norm(error))
    if angle <= max_angle:
        return rotation
    return rotvec_to_matrix(error * (max_angle / angle)) @ reference


def pose_from_column_major(values) -> tuple[np.ndarray, np.ndarray]:
    """libfranka's ``O_T_EE`` (16 values, column-major 4x4) -> (position, rotation)."""
    matrix = np.asarray(values, dtype=np.float64).reshape(4, 4).T
    return matrix[:3, 3].copy(), matrix[:3, :3].copy()


def pose_to_column_major(position: np.ndarray, rotation: np.ndarray) -> list[float]:
    matrix = np.eye(4)
    matrix[:3, :3], matrix[:3, 3] = rotation, position
    return matrix.T.reshape(-1).tolist()


def guarded_rotation_step(
    rotvec: np.ndarray,
    base: np.ndarray,
    start: np.ndarray,
    measured: np.ndarray,
    max_step_rad: float,
    max_orientation_change_rad: float,
    max_lead_rad: float,
) -> tuple[np.ndarray, tuple[str, ...]]:
    """How far the commanded orientation ``base`` may turn for a requested world-frame ``rotvec``:
    a step of at most ``max_step_rad``, a target within ``max_orientation_change_rad`` of the episode's
    ``start`` orientation and within ``max_lead_rad`` of the ``measured`` one (3x3 matrices; ``inf``
    turns a limit off). Returns the allowed step (axis-angle) and which limits clipped it. The robot
    agent's safety filter applies it, and the sim applies it the same way so a policy trains under it."""
    clipped = []
    if float(np.linalg.norm(rotvec)) > max_step_rad:
        rotvec = cap_norm(rotvec, max_step_rad)
        clipped.append("rotation")
    wanted = rotvec_to_matrix(rotvec) @ base
    target = limit_rotation(wanted, start, max_orientation_change_rad)
    if target is not wanted:
        clipped.append("orientation")
    led = limit_rotation(target, measured, max_lead_rad)
    if led is not target:
        clipped.append("rotation_lead")
    return cap_norm(matrix_to_rotvec(led @ base.T), max_step_rad), tuple(clipped)
