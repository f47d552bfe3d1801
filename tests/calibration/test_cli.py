"""``rlinf-calibrate`` end to end in the sim, and its one-line errors; apply-to-sim moves the sim camera."""

import json
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest

from calibration.board import BoardSpec
from calibration.hand_eye import make_transform, rotation_about
from calibration.intrinsics import Intrinsics
from calibration.sim_alignment import camera_entry, write_camera_file
from calibration.sim_target import SimCalibrationRig

ROOT = Path(__file__).resolve().parents[2]
EXE = str(Path(sys.executable).with_name("rlinf-calibrate"))


def run(*args):
    return subprocess.run([EXE, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_intrinsics_hand_eye_and_apply_to_sim_from_the_command_line(tmp_path):
    cameras, hand_eye, sim = tmp_path / "cameras.json", tmp_path / "hand_eye.json", tmp_path / "sim.json"
    result = run(
        "intrinsics", "--sim-camera", "front", "--serial", "sim-front", "--views", "15", "--out", str(cameras)
    )
    assert result.returncode == 0, result.stderr
    assert "RMS" in result.stdout and "sim-front" in json.loads(cameras.read_text())["cameras"]
    result = run("hand-eye", "--mode", "eye-to-hand", "--sim", "--out", str(hand_eye))
    assert result.returncode == 0, result.stderr
    assert "against the sim's true mount" in result.stdout
    board = tmp_path / "board.png"
    assert run("board", "--out", str(board)).returncode == 0 and board.stat().st_size > 1000
    from PIL import Image

    from calibration.sim_alignment import render_sim_view

    # The "real" frame: the scene through the true front camera (no calibration error at all).
    rig = SimCalibrationRig(BoardSpec())
    truth = tmp_path / "truth.json"
    write_camera_file(
        truth, {"front": camera_entry("front", rig.true_intrinsics("front"), rig.camera_pose("front"))}
    )
    rig.close()
    real = tmp_path / "real.png"
    Image.fromarray(render_sim_view("front", truth, 640, 480)).save(real)
    report = tmp_path / "report.png"
    result = run(
        "apply-to-sim", "--camera", "front", "--intrinsics", str(cameras), "--serial", "sim-front",
        "--hand-eye", str(hand_eye), "--out", str(sim), "--real-image", str(real), "--report", str(report),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert Image.open(report).size == (3 * 640, 480)
    # The measured camera reproduces the true view: the overlay is near-perfect.
    pixels = np.asarray(Image.open(report).convert("L"), dtype=float)
    real_part, sim_part = pixels[:, :640], pixels[:, 640:1280]
    assert np.abs(real_part - sim_part).mean() < 3.0


def test_apply_to_sim_puts_the_camera_where_it_was_measured(tmp_path):
    rig = SimCalibrationRig(BoardSpec())
    default = rig.camera_pose("front")
    rig.close()
    measured = make_transform(
        rotation_about([0, 0, 1], 5) @ default[:3, :3], default[:3, 3] + [0.05, -0.1, 0.02]
    )
    fovy = 48.0
    f = 480 / (2 * np.tan(np.radians(fovy / 2)))
    intrinsics = Intrinsics(
        np.array([[f, 0, 319.5], [0, f, 239.5], [0, 0, 1]]), np.zeros(5), 640, 480, 0.2, 20
    )
    path = tmp_path / "sim.json"
    write_camera_file(path, {"front": camera_entry("front", intrinsics, measured)})
    import sim_envs

    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=("front",), camera_file=str(path))
    env.reset(seed=0)
    model, data = env.unwrapped.model, env.unwrapped.data
    cam = model.camera("front").id
    mujoco.mj_forward(model, data)
    np.testing.assert_allclose(data.cam_xpos[cam], measured[:3, 3], atol=1e-5)
    np.testing.assert_allclose(
        data.cam_xmat[cam].reshape(3, 3) @ np.diag([1, -1, -1]), measured[:3, :3], atol=1e-5
    )
    assert model.cam_fovy[cam] == pytest.approx(fovy, abs=1e-3)
    env.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["intrinsics", "--images", "/nope", "--serial", "1"], "--images /nope is not a folder"),
        (
            ["intrinsics", "--sim-camera", "front", "--serial", "1", "--board", "seven"],
            "--board must look like 7x5",
        ),
        (["intrinsics", "--sim-camera", "front", "--serial", "1", "--views", "3"], "3 usable views, need 10"),
        (
            ["hand-eye", "--mode", "eye-in-hand", "--sim", "--sim-robot", "kuka"],
            "unknown robot 'kuka'; the sim has ['panda', 'ur5e']",
        ),
    ],
)
def test_bad_input_is_one_line(args, message):
    result = run(*args)
    assert result.returncode == 2 and message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_the_ur5es_wrist_camera_is_calibrated_and_applied_on_the_ur5e(tmp_path):
    """Eye-in-hand on the UR5e's scene: the hand-eye file names the arm, and apply-to-sim hangs the
    measured camera from the UR5e's gripper, where the scene's true wrist camera is."""
    import sim_envs

    cameras, hand_eye, sim = tmp_path / "cameras.json", tmp_path / "hand_eye.json", tmp_path / "sim.json"
    result = run("intrinsics", "--sim-camera", "wrist", "--sim-robot", "ur5e", "--serial", "ur-wrist",
                 "--views", "15", "--out", str(cameras))  # fmt: skip
    assert result.returncode == 0, result.stderr
    result = run("hand-eye", "--mode", "eye-in-hand", "--sim", "--sim-robot", "ur5e", "--out", str(hand_eye))
    assert result.returncode == 0, result.stderr
    measured = json.loads(hand_eye.read_text())
    assert measured["robot"] == "ur5e" and measured["against_sim_truth"]["error_mm"] < 5.0
    result = run("apply-to-sim", "--camera", "wrist", "--intrinsics", str(cameras), "--serial", "ur-wrist",
                 "--hand-eye", str(hand_eye), "--out", str(sim))  # fmt: skip
    assert result.returncode == 0, result.stderr
    poses = {}
    for camera_file in (None, sim):
        env = sim_envs.make("rlinf/UR5ePickLift-v0", cameras=("wrist",),
                            **({"camera_file": str(camera_file)} if camera_file else {}))  # fmt: skip
        env.reset(seed=0)
        model, data = env.unwrapped.model, env.unwrapped.data
        mujoco.mj_forward(model, data)
        poses[camera_file] = data.cam_xpos[model.camera("wrist").id].copy()
        env.close()
    assert np.linalg.norm(poses[sim] - poses[None]) < 0.005  # within hand-eye's 5 mm of the truth


def test_a_folder_without_the_board_says_what_was_expected(tmp_path):
    from PIL import Image

    Image.fromarray(np.full((120, 160, 3), 128, np.uint8)).save(tmp_path / "blank.png")
    result = run("intrinsics", "--images", str(tmp_path), "--serial", "1", "--out", str(tmp_path / "c.json"))
    assert result.returncode == 2
    assert "no board in view: expected a 7x5 ChArUco board (DICT_5X5_100)" in result.stderr
    assert not (tmp_path / "c.json").exists()


def test_a_live_camera_that_is_not_there_is_one_line(tmp_path):
    out = str(tmp_path / "out.json")
    result = run(
        "intrinsics", "--camera-kind", "realsense", "--camera-serial", "123", "--serial", "123", "--out", out
    )
    assert result.returncode == 2
    assert "the realsense camera needs pyrealsense2" in result.stderr and "Traceback" not in result.stderr
    result = run("hand-eye", "--mode", "eye-in-hand", "--robot", "franka", "--out", out)
    assert result.returncode == 2 and "--robot needs --camera-kind" in result.stderr


def test_the_twins_offset_cameras_are_measured_and_the_sim_takes_their_pose(tmp_path):
    """``--sim-gap``: hand-eye finds the cameras where the gap mounted them, not where the CAD model
    says, and apply-to-sim's camera file puts the sim's cameras there: the sim sees what the twin sees."""
    import sim_envs

    offset = {"front": {"pos_m": [-0.03, 0.04, 0.0], "rot_deg": [0.0, 3.0, -4.0]},
              "wrist": {"pos_m": [0.01, -0.01, 0.0], "rot_deg": [3.0, 0.0, 0.0]}}  # fmt: skip
    gap = tmp_path / "gap.json"
    gap.write_text(json.dumps({"camera_mount_offset": offset}))
    cameras = tmp_path / "sim_cameras.json"
    for camera, mode in (("front", "eye-to-hand"), ("wrist", "eye-in-hand")):
        intrinsics, hand_eye = tmp_path / f"{camera}_k.json", tmp_path / f"{camera}_he.json"
        for args in (
            ["intrinsics", "--sim-camera", camera, "--serial", camera, "--views", "12", "--out", str(intrinsics)],
            ["hand-eye", "--mode", mode, "--sim", "--poses", "12", "--out", str(hand_eye)],
            ["apply-to-sim", "--camera", camera, "--intrinsics", str(intrinsics), "--serial", camera,
             "--hand-eye", str(hand_eye), "--out", str(cameras)],
        ):  # fmt: skip
            result = run(*args, *(["--sim-gap", str(gap)] if args[0] != "apply-to-sim" else []))
            assert result.returncode == 0, result.stderr
        truth = json.loads(hand_eye.read_text())["against_sim_truth"]
        assert truth["error_mm"] < 8.0 and truth["error_deg"] < 0.6, (camera, truth)

    def images(**kwargs):
        env = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=("front", "wrist"), image_height=96,
                            image_width=96, **kwargs)  # fmt: skip
        obs, _ = env.reset(seed=1)
        env.close()
        return {k: v.astype(float) for k, v in obs["images"].items()}

    twin = images(randomization={"camera_mount_offset": offset})
    calibrated = images(camera_file=str(cameras))
    nominal = images()
    for camera in ("front", "wrist"):
        to_calibrated = np.abs(twin[camera] - calibrated[camera]).mean()
        to_nominal = np.abs(twin[camera] - nominal[camera]).mean()
        assert to_calibrated < 0.25 * to_nominal, (camera, to_calibrated, to_nominal)


def test_sim_gap_is_for_the_sim_and_a_bad_one_is_one_line(tmp_path):
    gap = tmp_path / "gap.json"
    gap.write_text(json.dumps({"camera_mount_offset": {"side": {"pos_m": [0, 0, 0.1]}}}))
    result = run(
        "hand-eye", "--mode", "eye-to-hand", "--sim", "--sim-gap", str(gap), "--out", str(tmp_path / "h")
    )
    assert result.returncode == 2 and "unknown camera 'side'" in result.stderr
    assert (
        result.stderr.startswith(f"rlinf-calibrate hand-eye: --sim-gap {gap}")
        and "Traceback" not in result.stderr
    )
    result = run("intrinsics", "--images", str(tmp_path), "--serial", "1", "--sim-gap", str(gap))
    assert result.returncode == 2 and "--sim-gap moves the sim's cameras" in result.stderr
    assert not (tmp_path / "h").exists()
