"""Hand-eye against the scene's true camera mounts (5 mm, 1 deg), with pixel noise, in both set-ups."""

import numpy as np
import pytest

from calibration.board import BoardSpec, CalibrationError
from calibration.hand_eye import make_transform, rotation_about, solve_hand_eye
from calibration.sim_target import SimCalibrationRig

SPEC = BoardSpec()


def angle_deg(a: np.ndarray, b: np.ndarray) -> float:
    relative = a[:3, :3].T @ b[:3, :3]
    return float(np.degrees(np.arccos(np.clip((np.trace(relative) - 1) / 2, -1, 1))))


@pytest.fixture(scope="module")
def rig():
    rig = SimCalibrationRig(SPEC, width=640, height=480)
    yield rig
    rig.close()


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "camera"), [("eye-in-hand", "wrist"), ("eye-to-hand", "front")])
def test_recovers_the_true_camera_mount(rig, mode, camera):
    used, robot, boards = rig.capture_hand_eye_pairs(mode, count=20, seed=0, noise_std=2.0)
    assert used == camera
    assert len(robot) >= 16, f"the board was seen from only {len(robot)} of 20 poses"
    result = solve_hand_eye(robot, boards, mode)
    truth = rig.true_hand_eye(mode, camera)  # the mount as the scene defines it
    error_mm = np.linalg.norm(result.transform[:3, 3] - truth[:3, 3]) * 1000
    assert error_mm < 5.0, f"{error_mm:.1f} mm"
    assert angle_deg(result.transform, truth) < 1.0
    assert result.residual_mm < 5.0
    assert set(result.per_method) == {"TSAI", "PARK", "HORAUD", "DANIILIDIS"}


def test_poor_pose_sets_are_rejected_with_what_to_do():
    A = [make_transform(np.eye(3), np.array([0.4 + 0.01 * i, 0, 0.3])) for i in range(10)]
    B = [make_transform(np.eye(3), np.array([0, 0, 0.5 - 0.01 * i])) for i in range(10)]
    with pytest.raises(CalibrationError, match="more rotation about different axes"):
        solve_hand_eye(A, B, "eye-in-hand")
    with pytest.raises(CalibrationError, match="3 pose pairs, need 8"):
        solve_hand_eye(A[:3], B[:3], "eye-in-hand")
    with pytest.raises(CalibrationError, match="mode must be one of"):
        solve_hand_eye(A, B, "eye-on-head")


def test_inconsistent_pairs_make_the_methods_disagree():
    rng = np.random.default_rng(0)
    A = [make_transform(rotation_about(rng.normal(size=3), 30), rng.uniform(-0.1, 0.1, 3)) for _ in range(10)]
    B = [
        make_transform(
            rotation_about(rng.normal(size=3), 30), rng.uniform(-0.1, 0.1, 3) + np.array([0, 0, 0.5])
        )
        for _ in range(10)
    ]
    with pytest.raises(CalibrationError, match="methods disagree"):
        solve_hand_eye(A, B, "eye-in-hand")
