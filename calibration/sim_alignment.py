"""Put the measured cameras into the sim: intrinsics give ``fovy``, hand-eye gives the pose.

``front`` is a fixed camera: its pose is the eye-to-hand result (camera in the robot base frame,
which is the sim's world frame). ``wrist`` rides on the hand: its pose is the eye-in-hand result
(camera in the TCP frame), moved into the hand frame the sim mounts it in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from calibration.board import CalibrationError
from calibration.intrinsics import Intrinsics, write_json_atomic
from calibration.sim_target import MUJOCO_TO_OPENCV_CAMERA

CAMERA_FILE_VERSION = 1  # the format sim_envs.scene.load_camera_mounts reads


def camera_entry(name: str, intrinsics: Intrinsics, T_parent_cam: np.ndarray, robot: str = "panda") -> dict:
    """One camera of the sim camera file, from OpenCV intrinsics and an OpenCV-convention pose.

    ``T_parent_cam`` is the camera in the robot base frame (``front``) or in the TCP frame (``wrist``);
    the wrist camera's parent in the sim is the arm's gripper body, the TCP along its z axis.
    """
    from sim_envs.sim_arm import sim_arm

    if name == "wrist":
        T_hand_tcp = np.eye(4)
        T_hand_tcp[2, 3] = sim_arm(robot).embodiment.flange_tcp_m
        T_parent_cam = T_hand_tcp @ T_parent_cam
    elif name != "front":
        raise CalibrationError(f"the sim scene has cameras 'front' and 'wrist', not {name!r}")
    rotation = T_parent_cam[:3, :3] @ MUJOCO_TO_OPENCV_CAMERA  # back to MuJoCo's camera axes
    return {
        "pos": T_parent_cam[:3, 3].tolist(),
        "xyaxes": [*rotation[:, 0].tolist(), *rotation[:, 1].tolist()],
        "fovy": intrinsics.fovy_deg(),
        "width": intrinsics.width,
        "height": intrinsics.height,
    }


def write_camera_file(path: str | Path, entries: dict[str, dict]) -> None:
    """Write (or update) the camera file that ``env.kwargs.camera_file`` points the sim at."""
    path = Path(path)
    cameras = {}
    if path.exists():
        import json

        cameras = json.loads(path.read_text()).get("cameras", {})
    cameras.update(entries)
    write_json_atomic(path, {"version": CAMERA_FILE_VERSION, "cameras": cameras})


def side_by_side(real: np.ndarray, sim: np.ndarray) -> np.ndarray:
    """Real | sim | a 50/50 overlay, for a person to judge the alignment."""
    if real.shape != sim.shape:
        from PIL import Image

        sim = np.asarray(Image.fromarray(sim).resize((real.shape[1], real.shape[0])))
    overlay = ((real.astype(np.uint16) + sim.astype(np.uint16)) // 2).astype(np.uint8)
    return np.concatenate([real, sim, overlay], axis=1)


def render_sim_view(
    camera: str, camera_file: str | Path, width: int, height: int, robot: str = "panda"
) -> np.ndarray:
    """The sim scene of ``robot`` (home pose) through a calibrated camera."""
    import sim_envs

    env = sim_envs.make(
        "rlinf/FrankaPickLift-v0",
        robot=robot,
        cameras=(camera,),
        image_height=height,
        image_width=width,
        camera_file=str(camera_file),
    )
    observation, _ = env.reset(seed=0)
    env.close()
    return observation["images"][camera]
