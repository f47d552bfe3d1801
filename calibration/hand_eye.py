"""Hand-eye calibration: where a camera sits on the gripper (eye-in-hand) or in the robot base frame
(eye-to-hand), from (robot pose, board pose) pairs, solving AX = XB with several methods at once."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from calibration.board import CalibrationError, Detection, import_cv2
from calibration.intrinsics import Intrinsics

MODES = ("eye-in-hand", "eye-to-hand")
METHODS = ("TSAI", "PARK", "HORAUD", "DANIILIDIS")


@dataclass(frozen=True)
class HandEyeConfig:
    methods: tuple[str, ...] = METHODS
    min_pairs: int = 8
    min_rotation_spread_deg: float = 20.0  # the robot poses must rotate at least this much between them
    max_method_disagreement_mm: float = 5.0
    max_method_disagreement_deg: float = 1.0


@dataclass(frozen=True)
class HandEyeResult:
    """``transform``: camera pose in the gripper frame (eye-in-hand) or in the base frame (eye-to-hand)."""

    mode: str
    transform: np.ndarray
    method: str
    residual_mm: float  # how far the board's implied fixed pose wanders across the pairs (RMS)
    residual_deg: float
    per_method: dict[str, np.ndarray] = field(default_factory=dict)
    disagreement_mm: float = 0.0
    disagreement_deg: float = 0.0

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "transform": self.transform.tolist(),
            "method": self.method,
            "residual_mm": self.residual_mm,
            "residual_deg": self.residual_deg,
            "disagreement_mm": self.disagreement_mm,
            "disagreement_deg": self.disagreement_deg,
        }


def board_pose(detection: Detection, intrinsics: Intrinsics) -> np.ndarray:
    """The board's pose in the camera frame, ``T_cam_board`` (4x4), from one detection."""
    cv2 = import_cv2()
    ok, rvec, tvec = cv2.solvePnP(
        detection.object_points,
        detection.image_points,
        intrinsics.K,
        intrinsics.dist,
        flags=cv2.SOLVEPNP_IPPE,
    )
    if not ok:
        raise CalibrationError("could not estimate the board pose in this view")
    ok, rvec, tvec = cv2.solvePnP(
        detection.object_points, detection.image_points, intrinsics.K, intrinsics.dist, rvec, tvec, True
    )  # refine with all points, from the planar solution
    return make_transform(cv2.Rodrigues(rvec)[0], tvec.reshape(3))


def solve_hand_eye(
    gripper_poses: list[np.ndarray],
    board_poses: list[np.ndarray],
    mode: str = "eye-in-hand",
    config: HandEyeConfig | None = None,
) -> HandEyeResult:
    """Solve with every configured method; refuse if the data are too poor or the methods disagree.

    ``gripper_poses`` are ``T_base_gripper`` (robot forward kinematics), ``board_poses`` are
    ``T_cam_board`` (from :func:`board_pose`), one pair per robot pose.
    """
    cv2 = import_cv2()
    config = config or HandEyeConfig()
    if mode not in MODES:
        raise CalibrationError(f"mode must be one of {MODES}, got {mode!r}")
    if len(gripper_poses) != len(board_poses):
        raise CalibrationError(f"{len(gripper_poses)} robot poses but {len(board_poses)} board poses")
    if len(gripper_poses) < config.min_pairs:
        raise CalibrationError(
            f"{len(gripper_poses)} pose pairs, need {config.min_pairs}: capture more poses"
        )
    spread = _max_rotation_between(gripper_poses)
    if spread < config.min_rotation_spread_deg:
        raise CalibrationError(
            f"the robot poses rotate at most {spread:.0f} deg apart (need {config.min_rotation_spread_deg:.0f}): "
            "use poses with more rotation about different axes"
        )
    # Eye-to-hand is the same equation with the robot poses inverted.
    robot = gripper_poses if mode == "eye-in-hand" else [np.linalg.inv(T) for T in gripper_poses]
    solutions = {}
    for name in config.methods:
        rotation, translation = cv2.calibrateHandEye(
            [T[:3, :3] for T in robot],
            [T[:3, 3] for T in robot],
            [T[:3, :3] for T in board_poses],
            [T[:3, 3] for T in board_poses],
            method=getattr(cv2, f"CALIB_HAND_EYE_{name}"),
        )
        solutions[name] = make_transform(rotation, translation.reshape(3))
    residuals = {name: _residual(robot, board_poses, X) for name, X in solutions.items()}
    best = min(residuals, key=lambda name: residuals[name][0])
    disagreement_mm = max(_distance_mm(solutions[best], X) for X in solutions.values())
    disagreement_deg = max(_angle_deg(solutions[best], X) for X in solutions.values())
    if (
        disagreement_mm > config.max_method_disagreement_mm
        or disagreement_deg > config.max_method_disagreement_deg
    ):
        raise CalibrationError(
            f"hand-eye methods disagree by {disagreement_mm:.1f} mm / {disagreement_deg:.2f} deg: "
            "add poses with more rotation diversity, and check the robot poses are synchronised with the images"
        )
    return HandEyeResult(
        mode=mode,
        transform=solutions[best],
        method=best,
        residual_mm=residuals[best][0],
        residual_deg=residuals[best][1],
        per_method=solutions,
        disagreement_mm=disagreement_mm,
        disagreement_deg=disagreement_deg,
    )


def pose_set(
    center: np.ndarray, count: int = 15, tilt_deg: float = 20.0, shift_m: float = 0.06, seed: int = 0
) -> list[np.ndarray]:
    """TCP poses around ``center`` (4x4) that rotate about varied axes: what AX = XB needs to be well posed."""
    rng = np.random.default_rng(seed)
    cv2 = import_cv2()
    poses = []
    for index in range(count):
        angle = np.radians(tilt_deg) * (0.5 + 0.5 * ((index % 3) / 2))
        axis = rng.normal(size=3)
        axis[2] *= 0.5  # mostly tilts, some twist
        axis /= np.linalg.norm(axis)
        rotation = cv2.Rodrigues(axis * angle)[0] @ center[:3, :3]
        translation = center[:3, 3] + rng.uniform(-shift_m, shift_m, 3) * np.array([1.0, 1.0, 0.5])
        poses.append(make_transform(rotation, translation))
    return poses


def rotation_about(axis, degrees: float) -> np.ndarray:
    """The rotation matrix of ``degrees`` about ``axis``."""
    axis = np.asarray(axis, float)
    return import_cv2().Rodrigues(axis / np.linalg.norm(axis) * np.radians(degrees))[0]


def make_transform(rotation: np.ndarray, translation: np.ndarray) -> np.ndarray:
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = rotation, translation
    return T


def _residual(robot: list[np.ndarray], boards: list[np.ndarray], X: np.ndarray) -> tuple[float, float]:
    """The board's pose in the fixed frame, implied by each pair, should be the same: its RMS spread."""
    implied = [A @ X @ B for A, B in zip(robot, boards)]
    mean_t = np.mean([T[:3, 3] for T in implied], axis=0)
    reference = implied[0]
    mm = float(np.sqrt(np.mean([np.sum((T[:3, 3] - mean_t) ** 2) for T in implied]))) * 1000
    deg = float(np.sqrt(np.mean([_angle_deg(reference, T) ** 2 for T in implied])))
    return mm, deg


def _distance_mm(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a[:3, 3] - b[:3, 3]) * 1000)


def _angle_deg(a: np.ndarray, b: np.ndarray) -> float:
    relative = a[:3, :3].T @ b[:3, :3]
    return float(np.degrees(np.arccos(np.clip((np.trace(relative) - 1) / 2, -1.0, 1.0))))


def _max_rotation_between(poses: list[np.ndarray]) -> float:
    return max(_angle_deg(a, b) for a in poses for b in poses)
