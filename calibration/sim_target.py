"""A ChArUco board in the MuJoCo tabletop scene (either arm), where every camera's true intrinsics and pose are known.

Used for ground-truth tests of the calibration and for unattended hand-eye runs on the sim twin.
The board is a textured quad on a mocap body (so it can be moved or left fixed on the table); the
arm is moved by the scene's own Cartesian impedance controller.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

import sim_envs  # noqa: F401  (before mujoco: it picks the headless GL backend)
from calibration.board import BoardSpec
from calibration.capture import guided_capture
from calibration.hand_eye import HandEyeResult, make_transform, pose_set, rotation_about, solve_hand_eye
from calibration.intrinsics import Intrinsics, calibrate_intrinsics

MARGIN_SQUARES = 0.5
# MuJoCo cameras look along -z with +y up; OpenCV cameras look along +z with +y down.
MUJOCO_TO_OPENCV_CAMERA = np.diag([1.0, -1.0, -1.0])


class SimCalibrationRig:
    """The tabletop scene of an arm (``robot``: panda or ur5e) plus a board. Poses are 4x4
    transforms in the robot base (world) frame."""

    def __init__(
        self, spec: BoardSpec, width: int = 640, height: int = 480, pixels_per_square: int = 120,
        camera_mount_offset: dict | None = None, robot: str = "panda",
    ) -> None:  # fmt: skip
        """``camera_mount_offset`` (a gap profile's): the cameras stand where the twin's do."""
        import mujoco

        from sim_envs.randomization import offset_camera_mounts
        from sim_envs.rendering import make_renderer
        from sim_envs.scene import SceneConfig, build_scene_xml
        from sim_envs.sim_arm import sim_arm

        self.spec, self.width, self.height = spec, width, height
        self._tmp = tempfile.TemporaryDirectory(prefix="rlinf-board-")
        texture = Path(self._tmp.name) / "charuco.png"
        image = spec.render(pixels_per_square, MARGIN_SQUARES)
        _write_png(texture, image)
        self.robot, self.embodiment = robot, sim_arm(robot).embodiment
        scene = SceneConfig(robot=robot, with_cube=False, offscreen_width=width, offscreen_height=height)
        xml = build_scene_xml(scene)
        full_w = spec.width_m + 2 * MARGIN_SQUARES * spec.square_length_m
        full_h = spec.height_m + 2 * MARGIN_SQUARES * spec.square_length_m
        xml = xml.replace("</asset>", _board_assets(texture, full_w, full_h) + "</asset>", 1)
        xml = xml.replace("</worldbody>", _BOARD_BODY + "</worldbody>", 1)
        self.model = mujoco.MjModel.from_xml_string(xml)
        offset_camera_mounts(self.model, camera_mount_offset or {})
        self.data = mujoco.MjData(self.model)
        self._mujoco = mujoco
        self._board_mocap = self.model.body("board").mocapid[0]
        self._target_mocap = self.model.body("tcp_target").mocapid[0]
        self._tcp = self.model.site("tcp").id
        self._renderer = make_renderer(self.model, height, width)
        self._noise = (0.0, 0)  # (sigma, next seed) for renders that do not pass their own
        # The board frame of OpenCV's ChArUco model: origin at the top-left inner board corner of
        # the printed image, x along the columns, y down the rows, z into the board.
        offset = MARGIN_SQUARES * spec.square_length_m
        self._quad_to_board = make_transform(
            np.diag([1.0, -1.0, -1.0]), np.array([-full_w / 2 + offset, full_h / 2 - offset, 0])
        )
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[: self.embodiment.num_joints] = self.embodiment.home_joints
        mujoco.mj_forward(self.model, self.data)
        self.data.mocap_pos[self._target_mocap] = self.data.site_xpos[self._tcp]
        self.data.mocap_quat[self._target_mocap] = _quat(self.data.site_xmat[self._tcp].reshape(3, 3))

    # -- the board ----------------------------------------------------------------------------------
    def set_board_pose(self, T_world_board: np.ndarray) -> None:
        """Place the board so that OpenCV's board frame sits at ``T_world_board``."""
        T_quad = T_world_board @ np.linalg.inv(self._quad_to_board)
        self.data.mocap_pos[self._board_mocap] = T_quad[:3, 3]
        self.data.mocap_quat[self._board_mocap] = _quat(T_quad[:3, :3])
        self._mujoco.mj_forward(self.model, self.data)

    def board_pose(self) -> np.ndarray:
        body = self.model.body("board").id
        T_quad = make_transform(self.data.xmat[body].reshape(3, 3), self.data.xpos[body])
        return T_quad @ self._quad_to_board

    # -- cameras ------------------------------------------------------------------------------------
    def render(self, camera: str, noise_std: float | None = None, seed: int | None = None) -> np.ndarray:
        """An RGB image from ``camera``, with optional Gaussian sensor noise (intensity units)."""
        if noise_std is None:  # the rig's default noise, a fresh draw per frame
            noise_std, seed = self._noise[0], self._noise[1]
            self._noise = (noise_std, seed + 1)
        self._renderer.update_scene(self.data, camera=camera)
        image = self._renderer.render()
        if noise_std > 0:
            rng = np.random.default_rng(seed)
            image = np.clip(image + rng.normal(0.0, noise_std, image.shape), 0, 255).astype(np.uint8)
        return image

    def true_intrinsics(self, camera: str) -> Intrinsics:
        """The pinhole camera MuJoCo renders: square pixels, centred principal point, no distortion."""
        fovy = np.radians(self.model.cam_fovy[self.model.camera(camera).id])
        f = self.height / (2.0 * np.tan(fovy / 2.0))
        # OpenCV puts pixel centres at integers; the image centre is at (w - 1) / 2.
        K = np.array([[f, 0, (self.width - 1) / 2], [0, f, (self.height - 1) / 2], [0, 0, 1.0]])
        return Intrinsics(K, np.zeros(5), self.width, self.height, 0.0, 0)

    def camera_pose(self, camera: str) -> np.ndarray:
        """``T_world_cam`` in the OpenCV camera convention."""
        cam = self.model.camera(camera).id
        rotation = self.data.cam_xmat[cam].reshape(3, 3) @ MUJOCO_TO_OPENCV_CAMERA
        return make_transform(rotation, self.data.cam_xpos[cam])

    def board_views(self, camera: str, count: int, seed: int = 0, noise_std: float = 2.0) -> list[np.ndarray]:
        """``count`` views for intrinsics: the board tilted 15-40 deg and spread over the image, at
        0.45-0.8 m from the front camera, 0.22-0.4 m from the wrist camera (above the table)."""
        near, far = (0.22, 0.4) if camera == "wrist" else (0.45, 0.8)
        rng = np.random.default_rng(seed)
        T_world_cam = self.camera_pose(camera)
        K = self.true_intrinsics(camera).K
        half = np.array([self.spec.width_m / 2, self.spec.height_m / 2, 0.0])
        images = []
        for index in range(count):
            depth = rng.uniform(near, far)
            tilt = rotation_about(rng.normal(size=3) * [1, 1, 0.3], rng.uniform(15, 40))
            # Aim the board's centre at a random image point, so the views reach into the corners.
            u, v = rng.uniform(0.15, 0.85) * self.width, rng.uniform(0.15, 0.85) * self.height
            centre = depth * np.array([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], 1.0])
            self.set_board_pose(T_world_cam @ make_transform(tilt, centre - tilt @ half))
            images.append(self.render(camera, noise_std=noise_std, seed=seed * 1000 + index))
        return images

    # -- the arm ------------------------------------------------------------------------------------
    def tcp_pose(self) -> np.ndarray:
        return make_transform(self.data.site_xmat[self._tcp].reshape(3, 3), self.data.site_xpos[self._tcp])

    def move_tcp(self, T_world_tcp: np.ndarray, seconds: float = 1.5) -> np.ndarray:
        """Drive the Cartesian controller to a TCP pose, let it settle, and return the pose reached."""
        self.data.mocap_pos[self._target_mocap] = T_world_tcp[:3, 3]
        self.data.mocap_quat[self._target_mocap] = _quat(T_world_tcp[:3, :3])
        steps = int(seconds / self.model.opt.timestep)
        self._mujoco.mj_step(self.model, self.data, nstep=steps)
        return self.tcp_pose()

    def close(self) -> None:
        self._renderer.close()
        self._tmp.cleanup()

    # -- unattended hand-eye capture -----------------------------------------------------------------
    def hand_eye_setup(self, mode: str) -> tuple[str, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """The camera, the centre TCP pose, and the board placement (on the table or on the gripper)."""
        centre = self.tcp_pose()
        if mode == "eye-in-hand":  # board on the table, the wrist camera looks down at it
            centre[:3, 3] = (0.42, 0.0, 0.33)
            flat = np.array([[0, 1, 0], [1, 0, 0], [0, 0, -1.0]])
            return "wrist", centre, make_transform(flat, np.array([0.26, -0.14, 0.001])), None
        # eye-to-hand: the board rides 5 cm in front of the gripper, facing the fixed front camera
        centre[:3, 3] = (0.45, 0.0, 0.35)
        T_world_cam = self.camera_pose("front")
        toward = T_world_cam[:3, 3] - centre[:3, 3]
        board_centre = centre[:3, 3] + 0.05 * toward / np.linalg.norm(toward)
        half = np.array([self.spec.width_m / 2, self.spec.height_m / 2, 0.0])
        facing = make_transform(T_world_cam[:3, :3], board_centre - T_world_cam[:3, :3] @ half)
        return "front", centre, None, np.linalg.inv(centre) @ facing

    def capture_hand_eye_pairs(
        self, mode: str, count: int = 15, seed: int = 0, noise_std: float = 2.0
    ) -> tuple[str, list[np.ndarray], list[np.ndarray]]:
        """Calibrate the camera's intrinsics, then move through a pose set: for each pose where the
        board is seen, the TCP pose reached and the board pose in the camera frame."""
        camera, centre, on_table, on_gripper = self.hand_eye_setup(mode)
        intrinsics = calibrate_intrinsics(self.board_views(camera, count=15, seed=seed + 11), self.spec)
        if on_table is not None:
            self.set_board_pose(on_table)
        tilt, shift = (18.0, 0.05) if mode == "eye-in-hand" else (20.0, 0.06)
        poses = pose_set(centre, count=count, tilt_deg=tilt, shift_m=shift, seed=seed)
        self._noise = (noise_std, 0)
        robot, boards, _ = guided_capture(self, camera, poses, intrinsics, self.spec, on_gripper=on_gripper)
        self._noise = (0.0, 0)
        return camera, robot, boards

    def true_hand_eye(self, mode: str, camera: str) -> np.ndarray:
        """The scene's own answer: the wrist camera in the TCP frame, or the front camera in the world."""
        if mode == "eye-in-hand":
            return np.linalg.inv(self.tcp_pose()) @ self.camera_pose(camera)
        return self.camera_pose(camera)


def sim_hand_eye(
    spec: BoardSpec, mode: str, count: int = 20, seed: int = 0, camera_mount_offset: dict | None = None,
    robot: str = "panda",
) -> tuple[HandEyeResult, tuple[float, float]]:  # fmt: skip
    """Run a hand-eye calibration unattended in the scene of ``robot`` (its cameras moved by a gap
    profile's ``camera_mount_offset``); also return its error against the truth."""
    rig = SimCalibrationRig(spec, camera_mount_offset=camera_mount_offset, robot=robot)
    try:
        camera, robot, boards = rig.capture_hand_eye_pairs(mode, count, seed)
        result = solve_hand_eye(robot, boards, mode)
        truth = rig.true_hand_eye(mode, camera)
    finally:
        rig.close()
    error_mm = float(np.linalg.norm(result.transform[:3, 3] - truth[:3, 3]) * 1000)
    relative = result.transform[:3, :3].T @ truth[:3, :3]
    error_deg = float(np.degrees(np.arccos(np.clip((np.trace(relative) - 1) / 2, -1, 1))))
    return result, (error_mm, error_deg)


_BOARD_BODY = """
    <body name="board" mocap="true" pos="0.5 0 0.3">
      <inertial pos="0 0 0" mass="0.1" diaginertia="1e-3 1e-3 1e-3"/>
      <geom name="board_quad" type="mesh" mesh="board_quad" material="board_mat" contype="0" conaffinity="0"/>
    </body>
"""


def _board_assets(texture: Path, width: float, height: float) -> str:
    w, h = width / 2, height / 2
    vertices = f"{-w} {-h} 0  {w} {-h} 0  {w} {h} 0  {-w} {h} 0"
    return f"""
    <texture name="board_tex" type="2d" file="{texture}"/>
    <material name="board_mat" texture="board_tex" specular="0" shininess="0" emission="0.6"/>
    <mesh name="board_quad" inertia="shell" vertex="{vertices}" texcoord="0 1  1 1  1 0  0 0" face="0 1 2  0 2 3"/>
"""


def _quat(rotation: np.ndarray) -> np.ndarray:
    import mujoco

    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, np.ascontiguousarray(rotation, dtype=np.float64).reshape(-1))
    return quat


def _write_png(path: Path, gray: np.ndarray) -> None:
    from PIL import Image

    Image.fromarray(gray).convert("RGB").save(path)
