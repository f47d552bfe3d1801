"""Named read/write access to the tabletop scene's MuJoCo state, for tasks and the env."""

from __future__ import annotations

import mujoco
import numpy as np

from sim_envs.scene import CUBE_COLORS, cube_name
from sim_envs.sim_arm import SimArm


class TabletopSceneView:
    """Reads poses and contacts from ``MjData`` by name, and places the cube and the goal."""

    def __init__(
        self, model: mujoco.MjModel, data: mujoco.MjData, cube_half_size: float, arm: SimArm
    ) -> None:
        self.model, self.data = model, data
        self.cube_half_size = cube_half_size
        self._tcp = model.site("tcp").id
        self._arm_qpos = np.array([model.joint(j).qposadr[0] for j in arm.arm_joints])
        self._arm_qvel = np.array([model.joint(j).dofadr[0] for j in arm.arm_joints])
        self._fingers = np.array([model.joint(j).qposadr[0] for j in arm.finger_joints])
        self._goal_mocap = model.body("goal").mocapid[0]
        self._cubes: dict[str, tuple[int, int]] = {}  # colour -> (qpos address, geom id)
        for color in CUBE_COLORS:
            joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, f"{cube_name(color)}_joint")
            if joint >= 0:
                geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, cube_name(color))
                self._cubes[color] = (int(model.jnt_qposadr[joint]), geom)
        self._cube_qpos = self._cubes["red"][0] if "red" in self._cubes else None
        self._cube_geom = self._cubes["red"][1] if "red" in self._cubes else -1
        self._pads = {model.geom(pad).id for pad in arm.finger_pads}
        self._tcp_quat = np.zeros(4)

    # -- robot -------------------------------------------------------------------------------
    @property
    def arm_qpos(self) -> np.ndarray:
        return self.data.qpos[self._arm_qpos]

    @property
    def arm_qvel(self) -> np.ndarray:
        return self.data.qvel[self._arm_qvel]

    @property
    def gripper_width(self) -> float:
        return float(self.data.qpos[self._fingers].sum())

    @property
    def tcp_pos(self) -> np.ndarray:
        return self.data.site_xpos[self._tcp].copy()

    @property
    def tcp_quat(self) -> np.ndarray:
        """TCP orientation (w, x, y, z), sign fixed so that w >= 0."""
        mujoco.mju_mat2Quat(self._tcp_quat, self.data.site_xmat[self._tcp])
        return self._tcp_quat.copy() if self._tcp_quat[0] >= 0 else -self._tcp_quat

    def set_arm(self, qpos: np.ndarray, gripper_width: float) -> None:
        self.data.qpos[self._arm_qpos] = qpos
        self.data.qvel[self._arm_qvel] = 0.0
        self.data.qpos[self._fingers] = gripper_width / 2

    # -- objects -----------------------------------------------------------------------------
    @property
    def cube_pos(self) -> np.ndarray:
        if self._cube_qpos is None:
            return np.zeros(3)
        return self.data.qpos[self._cube_qpos : self._cube_qpos + 3].copy()

    @property
    def cube_quat(self) -> np.ndarray:
        if self._cube_qpos is None:
            return np.array([1.0, 0.0, 0.0, 0.0])
        quat = self.data.qpos[self._cube_qpos + 3 : self._cube_qpos + 7].copy()
        return quat if quat[0] >= 0 else -quat

    @property
    def cube_colors(self) -> tuple[str, ...]:
        return tuple(self._cubes)

    def cube_pose_of(self, color: str) -> tuple[np.ndarray, np.ndarray]:
        """Position and (w, x, y, z) orientation (w >= 0) of the cube of ``color``."""
        adr = self._cubes[color][0]
        quat = self.data.qpos[adr + 3 : adr + 7].copy()
        return self.data.qpos[adr : adr + 3].copy(), quat if quat[0] >= 0 else -quat

    def place_cube_of(self, color: str, pos: np.ndarray, yaw: float) -> None:
        adr = self._cubes[color][0]
        self.data.qpos[adr : adr + 3] = pos
        self.data.qpos[adr + 3 : adr + 7] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]

    def fingers_touch_cube_of(self, color: str) -> bool:
        """True when both finger pads are in contact with the cube of ``color``."""
        geom = self._cubes[color][1]
        geom1, geom2 = self.data.contact.geom1, self.data.contact.geom2
        touching = np.concatenate([geom2[geom1 == geom], geom1[geom2 == geom]])
        return self._pads.issubset(touching.tolist())

    @property
    def goal_pos(self) -> np.ndarray:
        return self.data.mocap_pos[self._goal_mocap].copy()

    def place_cube(self, pos: np.ndarray, yaw: float) -> None:
        if self._cube_qpos is None:
            raise RuntimeError("this scene has no cube")
        self.place_cube_of("red", pos, yaw)

    def place_goal(self, pos: np.ndarray) -> None:
        self.data.mocap_pos[self._goal_mocap] = pos

    def fingers_touch_cube(self) -> bool:
        """True when both finger pads are in contact with the cube."""
        return "red" in self._cubes and self.fingers_touch_cube_of("red")


class PerceivedScene:
    """The scene as a perception module reports it: object positions shifted by ``offset`` (metres,
    world frame); everything else (the arm, the goal) as it is. Only observations read it; rewards
    and success judge the true scene."""

    def __init__(self, scene: TabletopSceneView, offset: np.ndarray) -> None:
        self._scene = scene
        self.offset = np.asarray(offset, np.float64)

    def __getattr__(self, name: str):
        return getattr(self._scene, name)

    @property
    def cube_pos(self) -> np.ndarray:
        return self._scene.cube_pos + self.offset

    def cube_pose_of(self, color: str) -> tuple[np.ndarray, np.ndarray]:
        pos, quat = self._scene.cube_pose_of(color)
        return pos + self.offset, quat
