"""``rlinf-calibrate``: camera intrinsics, hand-eye extrinsics and sim-camera alignment.

    rlinf-calibrate board --out board.png                       # print this, measure the squares
    rlinf-calibrate intrinsics --images DIR --serial 123456 --out cameras.json
    rlinf-calibrate intrinsics --sim-camera front --serial sim-front --out cameras.json
    rlinf-calibrate hand-eye --mode eye-in-hand --sim --out hand_eye.json
    rlinf-calibrate apply-to-sim --camera front --intrinsics cameras.json --serial 123456 \\
        --hand-eye hand_eye.json --out sim_cameras.json [--real-image front.png --report report.png]
    rlinf-calibrate sysid --dataset runs/robot_data --task pick_lift --out physics.json

Then train or evaluate with ``env.kwargs.camera_file=sim_cameras.json`` and
``env.kwargs.physics_file=physics.json``. A failed calibration never
overwrites a good file. Every error is one line that says what to do.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from calibration.board import BoardSpec, CalibrationError
from protos.cli_help import plain_docstring, plain_help
from protos.user_error import UserError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


def add_board_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--board", default="7x5", help="squares, columns x rows")
    parser.add_argument("--square", type=float, default=0.04, help="square side in metres")
    parser.add_argument("--marker", type=float, default=0.03, help="marker side in metres")
    parser.add_argument("--dictionary", default="DICT_5X5_100", help="the ArUco dictionary of the markers")


def add_camera_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--camera-serial", default="", help="live camera: its serial number")
    parser.add_argument("--camera-device", default="0", help="opencv camera: index or device path")
    parser.add_argument("--width", type=int, default=640, help="live camera: frame width in pixels")
    parser.add_argument("--height", type=int, default=480, help="live camera: frame height in pixels")
    parser.add_argument("--fps", type=float, default=30.0, help="live camera: frame rate")


def add_sim_gap_arg(parser: argparse.ArgumentParser, sim_flag: str) -> None:
    parser.add_argument(
        "--sim-gap",
        type=Path,
        help=f"with {sim_flag}: the sim twin's cameras, mounted as this gap profile's "
        "camera_mount_offset puts them (a JSON of randomisation keys)",
    )


def add_sim_robot_arg(parser: argparse.ArgumentParser, sim_flag: str) -> None:
    parser.add_argument(
        "--sim-robot", default="panda", help=f"with {sim_flag}: the arm in the sim scene (panda or ur5e)"
    )


def sim_camera_offsets(args: argparse.Namespace, sim: bool) -> dict:
    """``--sim-gap``'s camera mount offsets (validated), for the sim rig."""
    if args.sim_gap is None:
        return {}
    if not sim:
        raise CalibrationError("--sim-gap moves the sim's cameras: it goes with the sim, not a real camera")
    from sim_envs.randomization import DomainRandomization

    try:
        return DomainRandomization.from_any(json.loads(args.sim_gap.read_text())).camera_mount_offset
    except (OSError, ValueError, TypeError) as exc:
        raise CalibrationError(f"--sim-gap {args.sim_gap}: {exc}") from None


def open_camera(args: argparse.Namespace):
    """A started camera of the agent's camera interface; its errors become one line."""
    from robot_agent.cameras import CameraConfig, CameraError, make_camera

    config = CameraConfig(
        args.camera_kind,
        "calibration",
        args.width,
        args.height,
        args.fps,
        args.camera_serial,
        args.camera_device,
    )
    try:
        camera = make_camera(config).start()
        camera.wait_for_frame(5.0)
    except CameraError as exc:
        raise CalibrationError(str(exc)) from None
    return camera


def board_from_args(args: argparse.Namespace) -> BoardSpec:
    try:
        columns, rows = (int(v) for v in args.board.lower().split("x"))
    except ValueError:
        raise CalibrationError(f"--board must look like 7x5, got {args.board!r}") from None
    return BoardSpec(columns, rows, args.square, args.marker, args.dictionary)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlinf-calibrate", description=plain_docstring(__doc__))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    board = sub.add_parser("board", help="write a printable image of the ChArUco board")
    add_board_args(board)
    board.add_argument("--out", type=Path, required=True, help="the image to write (PNG)")
    board.add_argument("--pixels-per-square", type=int, default=200, help="resolution of the printed board")

    intrinsics = sub.add_parser("intrinsics", help="K, distortion and RMS error from board views")
    add_board_args(intrinsics)
    source = intrinsics.add_mutually_exclusive_group(required=True)
    source.add_argument("--images", type=Path, help="a folder of photos of the board")
    source.add_argument(
        "--sim-camera", choices=("front", "wrist"), help="render the views in the MuJoCo scene"
    )
    source.add_argument(
        "--camera-kind", choices=("realsense", "zed", "opencv"), help="capture from a live camera"
    )
    add_camera_args(intrinsics)
    add_sim_gap_arg(intrinsics, "--sim-camera")
    add_sim_robot_arg(intrinsics, "--sim-camera")
    intrinsics.add_argument("--views", type=int, default=20, help="views to render with --sim-camera")
    intrinsics.add_argument("--serial", required=True, help="the camera's serial number (the file's key)")
    intrinsics.add_argument(
        "--out", type=Path, default=Path("cameras.json"), help="the intrinsics file (updated per serial)"
    )

    hand_eye = sub.add_parser("hand-eye", help="camera pose on the gripper or in the base frame (AX = XB)")
    add_board_args(hand_eye)
    hand_eye.add_argument(
        "--mode",
        choices=("eye-in-hand", "eye-to-hand"),
        required=True,
        help="camera on the gripper, or fixed in the base frame",
    )
    where = hand_eye.add_mutually_exclusive_group(required=True)
    where.add_argument("--sim", action="store_true", help="run unattended in the MuJoCo scene")
    where.add_argument(
        "--robot", help="a robot_agent driver kind (franka, sim-twin, ...): asks before each move"
    )
    add_sim_gap_arg(hand_eye, "--sim")
    add_sim_robot_arg(hand_eye, "--sim")
    hand_eye.add_argument("--robot-config", type=Path, help="the robot's config file (its [driver] section)")
    hand_eye.add_argument(
        "--camera-kind", choices=("realsense", "zed", "opencv"), help="with --robot: the live camera"
    )
    add_camera_args(hand_eye)
    hand_eye.add_argument(
        "--intrinsics", type=Path, help="with --robot: the intrinsics file (keyed by --camera-serial)"
    )
    hand_eye.add_argument("--poses", type=int, default=20, help="arm poses to view the board from")
    hand_eye.add_argument(
        "--out", type=Path, default=Path("hand_eye.json"), help="the hand-eye file to write"
    )

    apply = sub.add_parser("apply-to-sim", help="write measured cameras into the sim's camera file")
    apply.add_argument(
        "--camera", choices=("front", "wrist"), required=True, help="the sim camera to replace"
    )
    apply.add_argument(
        "--intrinsics", type=Path, required=True, help="the intrinsics file (rlinf-calibrate intrinsics)"
    )
    apply.add_argument("--serial", required=True, help="the camera's serial number in that file")
    apply.add_argument(
        "--hand-eye", type=Path, required=True, help="the hand-eye file (rlinf-calibrate hand-eye)"
    )
    apply.add_argument(
        "--out",
        type=Path,
        default=Path("sim_cameras.json"),
        help="the sim's camera file (env.kwargs.camera_file)",
    )
    apply.add_argument("--real-image", type=Path, help="a real frame from the same camera, for the report")
    apply.add_argument("--report", type=Path, help="write real | sim | overlay here")

    sysid = sub.add_parser("sysid", help="fit the sim's physics to recorded robot episodes (CMA-ES)")
    sysid.add_argument(
        "--dataset", type=Path, required=True, help="a LeRobot v3 dataset of the robot's episodes"
    )
    sysid.add_argument("--task", default="pick_lift", help="the sim task the episodes were recorded in")
    sysid.add_argument("--params", default="", help="comma-separated parameters to fit (default: all)")
    sysid.add_argument("--episodes", type=int, default=20, help="use at most this many episodes")
    sysid.add_argument("--generations", type=int, default=16, help="CMA-ES generations")
    sysid.add_argument("--population", type=int, default=8, help="CMA-ES candidates per generation")
    sysid.add_argument("--seed", type=int, default=0, help="CMA-ES seed")
    sysid.add_argument(
        "--action-scale",
        default="",
        metavar="M,RAD",
        help="what a full action moved the robot by (its max_translation_m,max_rotation_rad; default the sim's)",
    )
    sysid.add_argument(
        "--out", type=Path, default=Path("physics.json"), help="the physics file (env.kwargs.physics_file)"
    )
    return plain_help(parser)


def run_board(args: argparse.Namespace) -> str:
    from PIL import Image

    spec = board_from_args(args)
    Image.fromarray(spec.render(args.pixels_per_square)).save(args.out)
    return (
        f"wrote {args.out}: {spec.squares_x}x{spec.squares_y} squares of {spec.square_length_m * 1000:g} mm"
    )


def run_intrinsics(args: argparse.Namespace) -> str:
    from calibration.intrinsics import calibrate_intrinsics, save_intrinsics

    spec = board_from_args(args)
    offsets = sim_camera_offsets(args, args.sim_camera is not None)
    if args.images is not None:
        images = load_images(args.images)
    elif args.camera_kind is not None:
        from calibration.capture import ask

        camera = open_camera(args)
        images = []
        try:
            for index in range(args.views):
                if ask(
                    f"view {index + 1}/{args.views}: place the board (vary distance, tilt, image corner), hold still"
                ):
                    images.append(camera.read_latest(max_age_s=0.2).image)
        finally:
            camera.stop()
    else:
        from calibration.sim_target import SimCalibrationRig

        rig = SimCalibrationRig(spec, camera_mount_offset=offsets, robot=args.sim_robot)
        images = rig.board_views(args.sim_camera, args.views)
        rig.close()
    result = calibrate_intrinsics(images, spec)
    save_intrinsics(args.out, args.serial, result)
    return (
        f"camera {args.serial}: fx {result.fx:.1f} fy {result.fy:.1f} cx {result.cx:.1f} cy {result.cy:.1f} px, "
        f"RMS {result.rms_px:.3f} px over {result.views} views -> {args.out}"
    )


def run_hand_eye(args: argparse.Namespace) -> str:
    from calibration.intrinsics import write_json_atomic

    offsets = sim_camera_offsets(args, args.sim)
    if args.robot:
        result, arm = robot_hand_eye(args)
        write_json_atomic(args.out, {"version": 1, **result.to_dict(), **({"robot": arm} if arm else {})})
        return (
            f"{args.mode}: {result.method}, residual {result.residual_mm:.2f} mm / {result.residual_deg:.3f} deg, "
            f"methods within {result.disagreement_mm:.2f} mm / {result.disagreement_deg:.3f} deg -> {args.out}"
        )
    from calibration.sim_target import sim_hand_eye

    result, truth_error = sim_hand_eye(
        board_from_args(args), args.mode, args.poses, camera_mount_offset=offsets, robot=args.sim_robot
    )
    truth = {"error_mm": truth_error[0], "error_deg": truth_error[1]}
    write_json_atomic(
        args.out, {"version": 1, **result.to_dict(), "robot": args.sim_robot, "against_sim_truth": truth}
    )
    return (
        f"{args.mode}: {result.method}, residual {result.residual_mm:.2f} mm / {result.residual_deg:.3f} deg, "
        f"methods within {result.disagreement_mm:.2f} mm / {result.disagreement_deg:.3f} deg; "
        f"against the sim's true mount {truth_error[0]:.2f} mm / {truth_error[1]:.3f} deg -> {args.out}"
    )


def run_apply(args: argparse.Namespace) -> str:
    from calibration.intrinsics import load_intrinsics
    from calibration.sim_alignment import camera_entry, render_sim_view, side_by_side, write_camera_file

    intrinsics = load_intrinsics(args.intrinsics, args.serial)
    try:
        hand_eye = json.loads(args.hand_eye.read_text())
    except (OSError, ValueError) as exc:
        raise CalibrationError(f"cannot read hand-eye file {args.hand_eye}: {exc}") from None
    expected = "eye-to-hand" if args.camera == "front" else "eye-in-hand"
    if hand_eye.get("mode") != expected:
        raise CalibrationError(
            f"the {args.camera} camera needs an {expected} result, {args.hand_eye} is {hand_eye.get('mode')}"
        )
    # The arm the hand-eye result was measured on (its wrist camera hangs from that arm's gripper).
    robot = hand_eye.get("robot", "panda")
    entry = camera_entry(args.camera, intrinsics, np.asarray(hand_eye["transform"]), robot)
    write_camera_file(args.out, {args.camera: entry})
    message = (
        f"{args.camera}: fovy {entry['fovy']:.2f} deg at {intrinsics.width}x{intrinsics.height} -> {args.out}"
    )
    if args.real_image and args.report:
        from PIL import Image

        real = np.asarray(Image.open(args.real_image).convert("RGB"))
        sim = render_sim_view(args.camera, args.out, real.shape[1], real.shape[0], robot)
        Image.fromarray(side_by_side(real, sim)).save(args.report)
        message += f"; report {args.report} (real | sim | overlay)"
    return message


def robot_hand_eye(args: argparse.Namespace):
    """Guided capture on a real robot: every move is confirmed by the person at the robot. Also the
    sim arm of the robot's embodiment (None if its driver declares none), for ``apply-to-sim``."""
    from calibration.capture import DriverRig, ask, guided_capture
    from calibration.hand_eye import pose_set, solve_hand_eye
    from calibration.intrinsics import load_intrinsics
    from robot_agent.config import AgentConfigError, load_config_file
    from robot_agent.drivers import DriverError, UnknownDriverError, make_driver

    if not (args.camera_kind and args.intrinsics):
        raise CalibrationError(
            "--robot needs --camera-kind (and --camera-serial) and --intrinsics from `intrinsics`"
        )
    intrinsics = load_intrinsics(args.intrinsics, args.camera_serial or args.camera_kind)
    try:
        config = load_config_file(args.robot_config) if args.robot_config else {}
        driver = make_driver(args.robot, config.get("driver", {}))
    except (AgentConfigError, UnknownDriverError, DriverError, ImportError) as exc:
        raise CalibrationError(str(exc)) from None
    camera = open_camera(args)
    try:
        rig = DriverRig(driver, {"calibration": lambda: camera.read_latest(max_age_s=0.2).image})
        poses = pose_set(rig.tcp_pose(), count=args.poses, tilt_deg=15.0, shift_m=0.04)
        robot, boards, skipped = guided_capture(
            rig, "calibration", poses, intrinsics, board_from_args(args), confirm=ask, settle_s=0.5
        )
        for reason in skipped:
            print(reason, file=sys.stderr)
        arm = driver.embodiment.sim_model if driver.embodiment is not None else None
        return solve_hand_eye(robot, boards, args.mode), arm
    finally:
        camera.stop()
        driver.close()


def action_scale_arg(text: str) -> dict[str, float] | None:
    """``--action-scale M,RAD`` -> the sim's ``max_translation_m`` / ``max_rotation_rad``."""
    if not text:
        return None
    try:
        metres, radians = (float(x) for x in text.split(","))
    except ValueError:
        raise CalibrationError(f"--action-scale must be M,RAD (e.g. 0.03,0.2), got {text!r}") from None
    if metres <= 0 or radians <= 0:
        raise CalibrationError(f"--action-scale must be positive, got {text!r}")
    return {"max_translation_m": metres, "max_rotation_rad": radians}


def run_sysid(args: argparse.Namespace) -> str:
    from tqdm import tqdm

    from calibration.sysid import (
        EpisodeReplayer,
        SysIdConfig,
        fit,
        load_recorded_episodes,
        physics_report,
        plot_overlay,
    )
    from sim_envs.physics import SEARCH_RANGES, write_physics_file
    from sim_envs.tasks import make_task

    try:
        make_task(args.task)
        params = tuple(p for p in args.params.split(",") if p) or tuple(SEARCH_RANGES)
        cfg = SysIdConfig(str(args.dataset), args.task, params, args.episodes, args.generations,
                          args.population, args.seed)  # fmt: skip
        recorded = load_recorded_episodes(args.dataset, args.episodes)
        replayer = EpisodeReplayer(args.task, recorded, action_scale_arg(args.action_scale))
    except ValueError as exc:  # SysIdError, an unknown task
        raise CalibrationError(str(exc)) from None
    episodes, fps = recorded.episodes, recorded.fps
    with tqdm(total=cfg.generations, desc="sysid", unit="generation") as bar:

        def progress(generation: int, best: float) -> None:
            bar.update(1)
            bar.set_postfix(error=f"{best:.4f}")

        result = fit(episodes, replayer, cfg, progress)
    report = physics_report(result, cfg, len(episodes))
    write_physics_file(args.out, result.params, args.task, report)
    overlay = args.out.with_name(args.out.stem + "_overlay.png")
    plot_overlay(overlay, episodes[0], replayer, result.params, fps)
    fitted = ", ".join(
        f"{name} {row['fitted']:.3g}{row['unit']}"
        + ("" if row["identified"] else " (not identified: nominal)")
        for name, row in result.per_parameter.items()
    )
    return (
        f"{fitted}; replay error {result.error_before:.4f} -> {result.error_after:.4f} over {len(episodes)} "
        f"episodes -> {args.out} (overlay {overlay})"
    )


def load_images(folder: Path) -> list[np.ndarray]:
    from PIL import Image

    if not folder.is_dir():
        raise CalibrationError(f"--images {folder} is not a folder")
    paths = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not paths:
        raise CalibrationError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in {folder}")
    return [np.asarray(Image.open(p).convert("RGB")) for p in paths]


COMMANDS = {
    "board": run_board,
    "intrinsics": run_intrinsics,
    "hand-eye": run_hand_eye,
    "apply-to-sim": run_apply,
    "sysid": run_sysid,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        print(COMMANDS[args.command](args))
    except UserError as exc:  # CalibrationError, or a sim config value (e.g. an unknown --sim-robot)
        print(f"rlinf-calibrate {args.command}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
