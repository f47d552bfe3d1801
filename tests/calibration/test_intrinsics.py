"""Intrinsics against MuJoCo's ground truth, and the checks that reject a poor calibration."""

import json

import numpy as np
import pytest

from calibration.board import BoardSpec, CalibrationError, detect
from calibration.intrinsics import (
    IntrinsicsConfig,
    calibrate_intrinsics,
    load_intrinsics,
    save_intrinsics,
)

SPEC = BoardSpec()


@pytest.mark.slow
def test_recovers_the_sim_cameras_intrinsics(rig):
    images = rig.board_views("front", count=20, seed=1)
    result = calibrate_intrinsics(images, SPEC)
    truth = rig.true_intrinsics("front")
    assert result.fx == pytest.approx(truth.fx, rel=0.01)
    assert result.fy == pytest.approx(truth.fy, rel=0.01)
    assert abs(result.cx - truth.cx) < 2.0 and abs(result.cy - truth.cy) < 2.0
    assert result.rms_px < 0.5
    assert result.fovy_deg() == pytest.approx(55.0, abs=0.6)  # the scene's front camera fovy


def test_too_few_views_and_poor_coverage_are_rejected_with_what_to_do(rig):
    images = rig.board_views("front", count=4, seed=2)
    with pytest.raises(CalibrationError, match="4 usable views, need 10: capture more views"):
        calibrate_intrinsics(images, SPEC)
    # Twelve views, all with the board in the same spot in the middle of the image.
    T_world_cam = rig.camera_pose("front")
    from calibration.hand_eye import make_transform

    rig.set_board_pose(T_world_cam @ make_transform(np.eye(3), np.array([-0.14, -0.1, 0.9])))
    same = [rig.render("front", noise_std=2.0, seed=i) for i in range(12)]
    with pytest.raises(CalibrationError, match="move it into the corners"):
        calibrate_intrinsics(same, SPEC)
    with pytest.raises(CalibrationError, match="tilt it"):
        calibrate_intrinsics(same, SPEC, IntrinsicsConfig(min_coverage=0.0))


def test_no_board_and_wrong_board_are_one_line_errors(rig):
    rig.set_board_pose(np.diag([1.0, 1.0, 1.0, 1.0]) @ np.eye(4))  # out of the front camera's view
    empty = rig.render("front")
    with pytest.raises(
        CalibrationError, match=r"no board in view: expected a 7x5 ChArUco board \(DICT_5X5_100\)"
    ):
        detect(empty, SPEC)
    image = rig.board_views("front", count=1, seed=3)[0]
    with pytest.raises(CalibrationError, match="DICT_5X5_100 are visible: wrong dictionary"):
        detect(image, BoardSpec(dictionary="DICT_4X4_50"))
    with pytest.raises(CalibrationError, match="unknown ArUco dictionary"):
        detect(image, BoardSpec(dictionary="DICT_9X9"))


def test_results_are_saved_by_serial_and_a_failure_never_overwrites(rig, tmp_path):
    images = rig.board_views("front", count=12, seed=4)
    result = calibrate_intrinsics(images, SPEC)
    path = tmp_path / "cameras.json"
    save_intrinsics(path, "123456", result)
    save_intrinsics(path, "654321", result)
    before = path.read_bytes()
    assert json.loads(before)["version"] == 1
    np.testing.assert_allclose(load_intrinsics(path, "123456").K, result.K)
    with pytest.raises(CalibrationError):
        save_intrinsics(path, "123456", calibrate_intrinsics(images[:3], SPEC))
    assert path.read_bytes() == before
    with pytest.raises(CalibrationError, match="no camera '999'"):
        load_intrinsics(path, "999")
    assert [p.name for p in tmp_path.iterdir()] == ["cameras.json"]  # no temp files left behind
