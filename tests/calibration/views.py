"""Board views for ground-truth tests: poses in front of a sim camera with varied tilt and placement."""

from __future__ import annotations

import numpy as np

from calibration.hand_eye import make_transform
from calibration.sim_target import SimCalibrationRig


def rotation(axis, degrees: float) -> np.ndarray:
    import cv2

    axis = np.asarray(axis, float)
    return cv2.Rodrigues(axis / np.linalg.norm(axis) * np.radians(degrees))[0]


def board_views(rig: SimCalibrationRig, camera: str, count: int, seed: int = 0, noise_std: float = 2.0):
    """Render ``count`` views: the board at 0.45-0.8 m, tilted up to 40 deg, spread over the image."""
    rng = np.random.default_rng(seed)
    T_world_cam = rig.camera_pose(camera)
    K = rig.true_intrinsics(camera).K
    images = []
    for index in range(count):
        depth = rng.uniform(0.45, 0.8)
        tilt = rotation(rng.normal(size=3) * [1, 1, 0.3], rng.uniform(15, 40))
        # Aim the board's centre at a random image point, so views reach into the corners.
        u, v = rng.uniform(0.15, 0.85) * rig.width, rng.uniform(0.15, 0.85) * rig.height
        centre = depth * np.array([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], 1.0])
        half = np.array([rig.spec.width_m / 2, rig.spec.height_m / 2, 0.0])
        T_cam_board = make_transform(tilt, centre - tilt @ half)
        rig.set_board_pose(T_world_cam @ T_cam_board)
        images.append(rig.render(camera, noise_std=noise_std, seed=seed * 1000 + index))
    return images
