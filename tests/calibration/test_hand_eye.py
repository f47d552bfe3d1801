"""Hand-eye against the scene's true camera mounts (5 mm, 1 deg), with pixel noise, in both set-ups."""

import numpy as np
import pytest

from calibration.board import BoardSpec, CalibrationError
from calibration.hand_eye import make_transform, rotation_about, solve_hand_eye

SPEC = BoardSpec()


def angle_deg(a: np.ndarray, b: np.ndarray) -> float:
    relative = a[:3, :3].T @ b[:3, :3]
    return float(np.degrees(np.arccos(np.clip((np.trace(relative) - 1) / 2, -1, 1))))


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


def test_guided_capture_asks_before_each_move_and_skips_what_it_cannot_use(rig):
    from calibration.capture import guided_capture

    camera, centre, on_table, _ = rig.hand_eye_setup("eye-in-hand")
    rig.set_board_pose(on_table)
    poses = [centre.copy() for _ in range(4)]
    poses[3][:3, 3] += (0.0, 0.6, 0.0)  # swings the camera off the board
    asked = []

    def operator(prompt: str) -> bool:
        asked.append(prompt)
        return len(asked) != 2  # the person declines the second move

    robot, boards, skipped = guided_capture(
        rig, camera, poses, rig.true_intrinsics(camera), SPEC, confirm=operator
    )
    assert len(asked) == 4 and asked[0].startswith("pose 1/4: move the TCP to (0.420, 0.000, 0.330)")
    assert len(robot) == len(boards) == 2
    assert skipped[0] == "pose 2: skipped by the operator"
    assert skipped[1].startswith("pose 4: no board in view")


@pytest.mark.slow
def test_driver_rig_moves_a_robot_driver_to_poses_through_its_safety_filter():
    from calibration.capture import DriverRig
    from robot_agent.drivers import make_driver

    driver = make_driver("sim-twin", {"task": "reach", "cameras": [], "randomization": "none"})
    try:
        driver.reset(seed=0)
        rig = DriverRig(driver, {})
        start = rig.tcp_pose()
        target = make_transform(
            rotation_about([1, 0, 0], 10) @ start[:3, :3], start[:3, 3] + np.array([0.08, -0.05, -0.1])
        )
        reached = rig.move_tcp(target, timeout_s=60)
        assert np.linalg.norm(reached[:3, 3] - target[:3, 3]) < 0.002
        assert angle_deg(reached, target) < 0.5
        outside = make_transform(
            start[:3, :3], start[:3, 3] + np.array([0.0, 0.0, 0.4])
        )  # above the safety box
        with pytest.raises(CalibrationError, match="inside the safety workspace"):
            rig.move_tcp(outside, timeout_s=3)
    finally:
        driver.close()
