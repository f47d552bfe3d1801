"""``PutOnPlateInScene25Primitives-v1``: a ManiSkill3 task in the style of RLinf's
``PutOnPlateInScene25`` (Bridge scenes, 25 object meshes and plates, fetched from the HF hub), built
from primitives that ship with ManiSkill, so it runs where nothing can be downloaded.

* **Scene.** ManiSkill's table and Panda; five cubes (red, green, blue, yellow, purple) and five flat
  plates (white, black, orange, cyan, pink). Each episode draws one of the 25 cube-plate pairs and one
  distracting cube and plate from the reset's seed; the other six wait off the table.
* **Instruction.** Per env and per episode: "put the red cube on the cyan plate"
  (``env.unwrapped.instructions``).
* **Success.** The named cube rests on the named plate (within the plate's rim, at its height) and is
  not held. The distractors count for nothing: the same cube on the other plate is not success.
* **Observation extras.** ``tcp_pose``, the named cube's and plate's positions; in state mode also
  the cube's pose, the distractors' positions and the hand-to-cube and cube-to-plate offsets.
* **Reward.** Dense: reach, grasp, carry to the plate; 5 at success (``normalized_dense``: / 5).

Imported by ``sim_envs.adapters.maniskill`` in ManiSkill's venv, which registers the id.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sapien
import torch
from mani_skill.envs.sapien_env import BaseEnv
from mani_skill.sensors.camera import CameraConfig
from mani_skill.utils import sapien_utils
from mani_skill.utils.building import actors
from mani_skill.utils.registration import register_env
from mani_skill.utils.scene_builder.table import TableSceneBuilder
from mani_skill.utils.structs.pose import Pose
from transforms3d.euler import euler2quat

TASK_ID = "PutOnPlateInScene25Primitives-v1"
CUBES = {
    "red cube": (0.85, 0.12, 0.12, 1.0),
    "green cube": (0.15, 0.7, 0.2, 1.0),
    "blue cube": (0.15, 0.3, 0.9, 1.0),
    "yellow cube": (0.95, 0.85, 0.1, 1.0),
    "purple cube": (0.55, 0.2, 0.75, 1.0),
}
PLATES = {
    "white plate": (0.95, 0.95, 0.95, 1.0),
    "black plate": (0.08, 0.08, 0.08, 1.0),
    "orange plate": (1.0, 0.5, 0.05, 1.0),
    "cyan plate": (0.1, 0.85, 0.85, 1.0),
    "pink plate": (1.0, 0.55, 0.75, 1.0),
}
PAIRS = len(CUBES) * len(PLATES)  # 25
CUBE_HALF = 0.02
PLATE_RADIUS, PLATE_HALF_THICKNESS = 0.06, 0.004
TABLE_HEIGHT = 0.9196429  # ManiSkill's table top is z = 0, its floor z = -TABLE_HEIGHT
FLAT = euler2quat(0, np.pi / 2, 0)  # SAPIEN's cylinders lie along x: stood on end, a plate
UPRIGHT = (1.0, 0.0, 0.0, 0.0)


def instruction(cube: int, plate: int) -> str:
    return f"put the {list(CUBES)[cube]} on the {list(PLATES)[plate]}"


@register_env(TASK_ID, max_episode_steps=80)
class PutOnPlateInScene25Primitives(BaseEnv):
    """Put the named cube on the named plate, beside a distracting cube and plate (module doc)."""

    SUPPORTED_ROBOTS = ["panda"]

    def __init__(self, *args, robot_uids="panda", robot_init_qpos_noise=0.02, **kwargs) -> None:
        self.robot_init_qpos_noise = robot_init_qpos_noise
        self.instructions: list[str] = []
        super().__init__(*args, robot_uids=robot_uids, **kwargs)

    @property
    def _default_sensor_configs(self):
        pose = sapien_utils.look_at(eye=[0.3, 0, 0.6], target=[-0.05, 0, 0.0])
        return [CameraConfig("base_camera", pose, 128, 128, np.pi / 2, 0.01, 100)]

    @property
    def _default_human_render_camera_configs(self):
        pose = sapien_utils.look_at(eye=[0.6, 0.7, 0.6], target=[0.0, 0.0, 0.1])
        return CameraConfig("render_camera", pose, 512, 512, 1, 0.01, 100)

    def _load_agent(self, options: dict) -> None:
        super()._load_agent(options, sapien.Pose(p=[-0.615, 0, 0]))

    def _load_scene(self, options: dict) -> None:
        self.table_scene = TableSceneBuilder(self, robot_init_qpos_noise=self.robot_init_qpos_noise)
        self.table_scene.build()
        self.cubes = [
            actors.build_cube(
                self.scene,
                CUBE_HALF,
                color,
                name=name.replace(" ", "_"),
                initial_pose=sapien.Pose(p=self._parked(i, CUBE_HALF), q=UPRIGHT),
            )
            for i, (name, color) in enumerate(CUBES.items())
        ]
        self.plates = [
            actors.build_cylinder(
                self.scene,
                PLATE_RADIUS,
                PLATE_HALF_THICKNESS,
                color,
                name=name.replace(" ", "_"),
                body_type="kinematic",
                initial_pose=sapien.Pose(p=self._parked(5 + i, PLATE_HALF_THICKNESS), q=FLAT),
            )
            for i, (name, color) in enumerate(PLATES.items())
        ]
        n = self.num_envs
        self.cube_index = torch.zeros(n, dtype=torch.long, device=self.device)  # the named cube, per env
        self.plate_index = torch.zeros(n, dtype=torch.long, device=self.device)
        self.other_cube_index = torch.ones(n, dtype=torch.long, device=self.device)
        self.other_plate_index = torch.ones(n, dtype=torch.long, device=self.device)
        self.instructions = [instruction(0, 0)] * n

    @staticmethod
    def _parked(slot: int, half_height: float) -> list[float]:
        """Where an unused cube or plate waits: on the floor beside the table, out of the cameras."""
        return [0.0, 1.2 + 0.15 * slot, -TABLE_HEIGHT + half_height]

    def _initialize_episode(self, env_idx: torch.Tensor, options: dict) -> None:
        with torch.device(self.device):
            b = len(env_idx)
            self.table_scene.initialize(env_idx)
            pair = torch.randint(0, PAIRS, (b,))
            cube, plate = pair // len(PLATES), pair % len(PLATES)
            other_cube = (cube + torch.randint(1, len(CUBES), (b,))) % len(CUBES)
            other_plate = (plate + torch.randint(1, len(PLATES), (b,))) % len(PLATES)
            # Cubes near the robot, plates beyond them; which side the named one takes is drawn.
            side = torch.where(torch.rand(b) < 0.5, -1.0, 1.0)
            jitter = lambda: (torch.rand(b, 2) * 2 - 1) * 0.02  # noqa: E731
            cube_xy = torch.stack([torch.full((b,), -0.06), 0.1 * side], 1) + jitter()
            other_cube_xy = torch.stack([torch.full((b,), -0.06), -0.1 * side], 1) + jitter()
            plate_xy = torch.stack([torch.full((b,), 0.1), -0.1 * side], 1) + jitter()
            other_plate_xy = torch.stack([torch.full((b,), 0.1), 0.1 * side], 1) + jitter()
            for i, actor in enumerate(self.cubes):
                roles = [(cube, cube_xy), (other_cube, other_cube_xy)]
                self._place(actor, i, self._parked(i, CUBE_HALF), CUBE_HALF, UPRIGHT, roles)
            for i, actor in enumerate(self.plates):
                roles = [(plate, plate_xy), (other_plate, other_plate_xy)]
                self._place(
                    actor, i, self._parked(5 + i, PLATE_HALF_THICKNESS), PLATE_HALF_THICKNESS, FLAT, roles
                )
            self.cube_index[env_idx], self.plate_index[env_idx] = cube, plate
            self.other_cube_index[env_idx], self.other_plate_index[env_idx] = other_cube, other_plate
            for row, env in enumerate(env_idx.tolist()):
                self.instructions[env] = instruction(int(cube[row]), int(plate[row]))

    @staticmethod
    def _place(actor, index: int, parked: list[float], half_height: float, q, roles: list) -> None:
        """Put cube or plate ``index`` where the role that drew it says (per env), else at ``parked``.
        ``roles``: (drawn index [b], xy [b, 2]) pairs."""
        b = len(roles[0][0])
        xyz = torch.tensor(parked).repeat(b, 1)
        for drawn, xy in roles:
            mine = drawn == index
            xyz[mine, :2] = xy[mine]
            xyz[mine, 2] = half_height
        actor.set_pose(Pose.create_from_pq(xyz, torch.tensor(list(q), dtype=torch.float32).repeat(b, 1)))

    def _positions(self, group: list, index: torch.Tensor) -> torch.Tensor:
        """[N, 3]: the position of cube or plate ``index[e]`` in each env e."""
        every = torch.stack([actor.pose.p for actor in group])  # [5, N, 3]
        return every[index, torch.arange(len(index), device=index.device)]

    def evaluate(self) -> dict[str, torch.Tensor]:
        # The named pair's positions go into the info: the observation and the reward read them there.
        cube = self._positions(self.cubes, self.cube_index)
        plate = self._positions(self.plates, self.plate_index)
        offset = cube - plate
        on_plate = (torch.linalg.norm(offset[:, :2], dim=1) <= PLATE_RADIUS - CUBE_HALF / 2) & (
            torch.abs(offset[:, 2] - PLATE_HALF_THICKNESS - CUBE_HALF) <= 0.01
        )
        grasping = torch.stack([self.agent.is_grasping(actor) for actor in self.cubes])
        is_grasped = grasping[self.cube_index, torch.arange(self.num_envs, device=self.device)]
        return {
            "success": on_plate & ~is_grasped,
            "is_on_plate": on_plate,
            "is_grasped": is_grasped,
            "cube_pos": cube,
            "plate_pos": plate,
        }

    def _get_obs_extra(self, info: dict) -> dict[str, torch.Tensor]:
        cube_pos, plate_pos = info["cube_pos"], info["plate_pos"]
        obs = {"tcp_pose": self.agent.tcp_pose.raw_pose, "cube_pos": cube_pos, "plate_pos": plate_pos}
        if "state" in self.obs_mode:
            poses = torch.stack([actor.pose.raw_pose for actor in self.cubes])
            obs.update(
                is_grasped=info["is_grasped"],
                cube_pose=poses[self.cube_index, torch.arange(self.num_envs, device=self.device)],
                other_cube_pos=self._positions(self.cubes, self.other_cube_index),
                other_plate_pos=self._positions(self.plates, self.other_plate_index),
                tcp_to_cube_pos=cube_pos - self.agent.tcp_pose.p,
                cube_to_plate_pos=plate_pos - cube_pos,
            )
        return obs

    def compute_dense_reward(self, obs: Any, action: torch.Tensor, info: dict) -> torch.Tensor:
        cube = info["cube_pos"]
        above_plate = info["plate_pos"] + torch.tensor(
            [0.0, 0.0, PLATE_HALF_THICKNESS + CUBE_HALF], device=self.device
        )
        reward = 1 - torch.tanh(5 * torch.linalg.norm(cube - self.agent.tcp_pose.p, dim=1))
        reward = reward + info["is_grasped"]
        reward = reward + (1 - torch.tanh(5 * torch.linalg.norm(above_plate - cube, dim=1))) * (
            info["is_grasped"] | info["is_on_plate"]
        )
        reward = reward + info["is_on_plate"]
        reward[info["success"]] = 5.0
        return reward

    def compute_normalized_dense_reward(self, obs: Any, action: torch.Tensor, info: dict) -> torch.Tensor:
        return self.compute_dense_reward(obs, action, info) / 5.0
