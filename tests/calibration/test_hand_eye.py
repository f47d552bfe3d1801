"""Hand-eye against the scene's true camera mounts (5 mm, 1 deg), with pixel noise, in both set-ups."""

import numpy as np
import pytest

from calibration.board import BoardSpec, CalibrationError, detect
from calibration.hand_eye import board_pose, make_transform, pose_set, solve_hand_eye
from calibration.intrinsics import calibrate_intrinsics
from calibration.sim_target import SimCalibrationRig
from tests.calibration.views import board_views, rotation

SPEC = BoardSpec()
TABLE_Z = 0.0


def angle_deg(a: np.ndarray, b: np.ndarray) -> float:
    relative = a[:3, :3].T @ b[:3, :3]
    return float(np.degrees(np.arccos(np.clip((np.trace(relative) - 1) / 2, -1, 1))))


@pytest.fixture(scope="module")
def rig():
    rig = SimCalibrationRig(SPEC, width=640, height=480)
    yield rig
    rig.close()


def capture_pairs(rig, camera, poses, board_on_table=None, board_on_gripper=None, noise_std=2.0):
    """Calibrate ``camera``'s intrinsics, then move through ``poses``: the TCP pose reached and the
    board pose the camera sees, for each pose where it sees the board."""
    intrinsics = calibrate_intrinsics(board_views(rig, camera, count=15, seed=11), SPEC)
    if board_on_table is not None:
        rig.set_board_pose(board_on_table)
    robot, boards = [], []
    for index, target in enumerate(poses):
        reached = rig.move_tcp(target)
        if board_on_gripper is not None:
            rig.set_board_pose(reached @ board_on_gripper)
        image = rig.render(camera, noise_std=noise_std, seed=index)
        try:
            detection = detect(image, SPEC)
        except CalibrationError:
            continue  # as on a real robot: a pose where the board is out of view is skipped
        robot.append(reached)
        boards.append(board_pose(detection, intrinsics))
    assert len(robot) >= 0.8 * len(poses), f"the board was seen from only {len(robot)} of {len(poses)} poses"
    return robot, boards


@pytest.mark.slow
def test_eye_in_hand_recovers_the_wrist_camera_mount(rig):
    # The board lies on the table; the wrist camera looks at it from poses above it.
    board = make_transform(
        np.array([[0, 1, 0], [1, 0, 0], [0, 0, -1.0]]), np.array([0.26, -0.14, TABLE_Z + 0.001])
    )
    centre = rig.tcp_pose()
    centre[:3, 3] = (0.42, 0.0, 0.33)
    poses = pose_set(centre, count=15, tilt_deg=18, shift_m=0.05, seed=0)
    robot, boards = capture_pairs(rig, "wrist", poses, board_on_table=board)
    result = solve_hand_eye(robot, boards, "eye-in-hand")
    truth = np.linalg.inv(rig.tcp_pose()) @ rig.camera_pose("wrist")  # the mount, from the scene
    error_mm = np.linalg.norm(result.transform[:3, 3] - truth[:3, 3]) * 1000
    assert error_mm < 5.0, f"{error_mm:.1f} mm"
    assert angle_deg(result.transform, truth) < 1.0
    assert result.residual_mm < 5.0 and result.method in ("TSAI", "PARK", "HORAUD", "DANIILIDIS")
    assert set(result.per_method) == {"TSAI", "PARK", "HORAUD", "DANIILIDIS"}


@pytest.mark.slow
def test_eye_to_hand_recovers_the_front_camera_pose(rig):
    # The board rides on the gripper, 5 cm in front of it; the fixed front camera watches it.
    centre = rig.tcp_pose()
    centre[:3, 3] = (0.45, 0.0, 0.35)
    T_world_cam = rig.camera_pose("front")
    toward_camera = T_world_cam[:3, 3] - centre[:3, 3]
    board_centre = centre[:3, 3] + 0.05 * toward_camera / np.linalg.norm(toward_camera)
    half = np.array([SPEC.width_m / 2, SPEC.height_m / 2, 0.0])
    facing_camera = make_transform(T_world_cam[:3, :3], board_centre - T_world_cam[:3, :3] @ half)
    on_gripper = np.linalg.inv(centre) @ facing_camera
    robot, boards = capture_pairs(
        rig,
        "front",
        pose_set(centre, count=15, tilt_deg=20, shift_m=0.06, seed=1),
        board_on_gripper=on_gripper,
    )
    result = solve_hand_eye(robot, boards, "eye-to-hand")
    truth = rig.camera_pose("front")
    assert np.linalg.norm(result.transform[:3, 3] - truth[:3, 3]) * 1000 < 5.0
    assert angle_deg(result.transform, truth) < 1.0


def test_poor_pose_sets_are_rejected_with_what_to_do():
    A = [make_transform(np.eye(3), np.array([0.4 + 0.01 * i, 0, 0.3])) for i in range(10)]
    B = [make_transform(np.eye(3), np.array([0, 0, 0.5 - 0.01 * i])) for i in range(10)]
    with pytest.raises(CalibrationError, match="more rotation about different axes"):
        solve_hand_eye(A, B, "eye-in-hand")
    with pytest.raises(CalibrationError, match="3 pose pairs, need 8"):
        solve_hand_eye(A[:3], B[:3], "eye-in-hand")
    with pytest.raises(CalibrationError, match="mode must be one of"):
        solve_hand_eye(A, B, "eye-on-head")


def test_inconsistent_pairs_make_the_methods_disagree(rig):
    rng = np.random.default_rng(0)
    A = [make_transform(rotation(rng.normal(size=3), 30), rng.uniform(-0.1, 0.1, 3)) for _ in range(10)]
    B = [
        make_transform(rotation(rng.normal(size=3), 30), rng.uniform(-0.1, 0.1, 3) + [0, 0, 0.5])
        for _ in range(10)
    ]
    with pytest.raises(CalibrationError, match="methods disagree"):
        solve_hand_eye(A, B, "eye-in-hand")
