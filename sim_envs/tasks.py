"""Task definitions: what to randomise at reset, what to observe, how to reward and judge success.

Each task is one small class. The env owns the physics; a task only reads the scene through
:class:`SceneView` and places objects and the goal at reset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from protos import StateField
from sim_envs.errors import EnvConfigError

# Workspace the tasks sample from (metres, world frame; the table top is z = 0).
OBJECT_X = (0.42, 0.62)
OBJECT_Y = (-0.15, 0.15)
REACH_GOAL_LOW = (0.35, -0.2, 0.08)
REACH_GOAL_HIGH = (0.65, 0.2, 0.35)


class SceneView(Protocol):
    """What a task may read and set in the scene."""

    tcp_pos: np.ndarray
    cube_pos: np.ndarray
    cube_quat: np.ndarray
    goal_pos: np.ndarray
    cube_half_size: float

    def fingers_touch_cube(self) -> bool: ...
    def place_cube(self, pos: np.ndarray, yaw: float) -> None: ...
    def cube_pose_of(self, color: str) -> tuple[np.ndarray, np.ndarray]: ...
    def place_cube_of(self, color: str, pos: np.ndarray, yaw: float) -> None: ...
    def fingers_touch_cube_of(self, color: str) -> bool: ...
    def place_goal(self, pos: np.ndarray) -> None: ...


@dataclass(frozen=True)
class TaskResult:
    dense_reward: float
    success: bool


class Task(Protocol):
    name: str
    instruction: str
    max_episode_steps: int
    with_cube: bool

    def state_fields(self) -> tuple[StateField, ...]: ...
    def task_state(self, scene: SceneView) -> np.ndarray: ...
    def object_fields(self) -> tuple[StateField, ...]: ...
    def object_state(self, scene: SceneView) -> np.ndarray: ...
    def reset(self, scene: SceneView, rng: np.random.Generator) -> None: ...
    def evaluate(self, scene: SceneView) -> TaskResult: ...


_CUBE_FIELDS = (StateField("cube_pos", 3), StateField("cube_quat", 4), StateField("cube_rel_tcp", 3))


def _shaped_distance(distance: float, scale: float = 10.0) -> float:
    return 1.0 - float(np.tanh(scale * distance))


def _sample_cube_xy(rng: np.random.Generator) -> np.ndarray:
    return np.array([rng.uniform(*OBJECT_X), rng.uniform(*OBJECT_Y)])


class ReachTask:
    """Move the gripper's tool centre point to a goal point in free space."""

    name = "reach"
    instruction = "move the gripper to the green target"
    max_episode_steps = 50
    with_cube = False
    success_distance = 0.03

    def state_fields(self) -> tuple[StateField, ...]:
        return (StateField("goal_pos", 3), StateField("goal_rel_tcp", 3))

    def task_state(self, scene: SceneView) -> np.ndarray:
        return np.concatenate([scene.goal_pos, scene.goal_pos - scene.tcp_pos])

    def object_fields(self) -> tuple[StateField, ...]:
        return ()  # the goal is a point in the air, not an object a perception module could see

    def object_state(self, scene: SceneView) -> np.ndarray:
        return np.zeros(0)

    def reset(self, scene: SceneView, rng: np.random.Generator) -> None:
        scene.place_goal(rng.uniform(REACH_GOAL_LOW, REACH_GOAL_HIGH))

    def evaluate(self, scene: SceneView) -> TaskResult:
        distance = float(np.linalg.norm(scene.goal_pos - scene.tcp_pos))
        success = distance < self.success_distance
        return TaskResult(1.0 if success else _shaped_distance(distance, 5.0), success)


class PushTask:
    """Push the cube across the table onto a goal spot."""

    name = "push"
    instruction = "push the red cube to the green target"
    max_episode_steps = 80
    with_cube = True
    success_distance = 0.04

    def state_fields(self) -> tuple[StateField, ...]:
        return (
            StateField("cube_pos", 3),
            StateField("cube_quat", 4),
            StateField("goal_pos", 3),
            StateField("cube_rel_tcp", 3),
            StateField("goal_rel_cube", 3),
        )

    def task_state(self, scene: SceneView) -> np.ndarray:
        return np.concatenate(
            [
                scene.cube_pos,
                scene.cube_quat,
                scene.goal_pos,
                scene.cube_pos - scene.tcp_pos,
                scene.goal_pos - scene.cube_pos,
            ]
        )

    def object_fields(self) -> tuple[StateField, ...]:
        return _CUBE_FIELDS

    def object_state(self, scene: SceneView) -> np.ndarray:
        return np.concatenate([scene.cube_pos, scene.cube_quat, scene.cube_pos - scene.tcp_pos])

    def reset(self, scene: SceneView, rng: np.random.Generator) -> None:
        cube_xy = _sample_cube_xy(rng)
        scene.place_cube(np.array([*cube_xy, scene.cube_half_size]), rng.uniform(-np.pi, np.pi))
        angle = rng.uniform(-np.pi, np.pi)
        offset = rng.uniform(0.1, 0.15) * np.array([np.cos(angle), np.sin(angle)])
        goal_xy = np.clip(cube_xy + offset, [0.35, -0.25], [0.7, 0.25])
        scene.place_goal(np.array([*goal_xy, scene.cube_half_size]))

    def push_pose(self, scene: SceneView) -> np.ndarray:
        """Where the fingertips should be to push the cube towards the goal: just behind it."""
        direction = (scene.goal_pos - scene.cube_pos)[:2]
        direction = direction / max(float(np.linalg.norm(direction)), 1e-6)
        behind = scene.cube_pos[:2] - direction * (scene.cube_half_size + 0.03)
        return np.array([behind[0], behind[1], scene.cube_half_size + 0.005])

    def evaluate(self, scene: SceneView) -> TaskResult:
        cube_to_goal = float(np.linalg.norm((scene.goal_pos - scene.cube_pos)[:2]))
        success = cube_to_goal < self.success_distance
        # Stage 1: get behind the cube; stage 2 (once there): bring the cube to the goal.
        tcp_to_push_pose = float(np.linalg.norm(self.push_pose(scene) - scene.tcp_pos))
        behind = tcp_to_push_pose < 0.03 or float(np.linalg.norm(scene.cube_pos - scene.tcp_pos)) < 0.05
        dense = 0.3 * _shaped_distance(tcp_to_push_pose, 5.0)
        if behind:
            dense = 0.3 + 0.7 * _shaped_distance(cube_to_goal, 5.0)
        return TaskResult(1.0 if success else dense, success)


class PickLiftTask:
    """Grasp the cube and lift it at least 5 cm off the table."""

    name = "pick_lift"
    instruction = "pick up the red cube and lift it"
    max_episode_steps = 80
    with_cube = True
    lift_height = 0.05

    def state_fields(self) -> tuple[StateField, ...]:
        return _CUBE_FIELDS

    def task_state(self, scene: SceneView) -> np.ndarray:
        return self.object_state(scene)

    def object_fields(self) -> tuple[StateField, ...]:
        return _CUBE_FIELDS

    def object_state(self, scene: SceneView) -> np.ndarray:
        return np.concatenate([scene.cube_pos, scene.cube_quat, scene.cube_pos - scene.tcp_pos])

    def reset(self, scene: SceneView, rng: np.random.Generator) -> None:
        cube_xy = _sample_cube_xy(rng)
        scene.place_cube(np.array([*cube_xy, scene.cube_half_size]), rng.uniform(-np.pi, np.pi))
        # The goal marker shows the lift height above the cube's start.
        scene.place_goal(np.array([*cube_xy, scene.cube_half_size + self.lift_height]))

    def lift(self, scene: SceneView) -> float:
        return float(scene.cube_pos[2] - scene.cube_half_size)

    def evaluate(self, scene: SceneView) -> TaskResult:
        lift = self.lift(scene)
        success = lift >= self.lift_height
        reach = _shaped_distance(float(np.linalg.norm(scene.cube_pos - scene.tcp_pos)))
        grasped = float(scene.fingers_touch_cube())
        progress = float(np.clip(lift / self.lift_height, 0.0, 1.0))
        dense = 0.25 * reach + 0.25 * grasped + 0.5 * progress * grasped
        return TaskResult(1.0 if success else dense, success)


class PickColorTask:
    """Three cubes (red, green, blue); the instruction names one, drawn each episode: lift that one.

    Success only for the named cube. The privileged state (what the scripted expert reads) gives the
    named cube's pose under the pick-lift fields, every cube's position in colour order, and the named
    colour one-hot; a policy that sees proprioception and cameras has only the words to go by.
    """

    name = "pick_color"
    instruction = "lift the red cube"  # the spec's example; each episode names its own cube
    max_episode_steps = 80
    with_cube = True
    colors = ("red", "green", "blue")
    extra_cubes = ("green", "blue")
    lift_height = PickLiftTask.lift_height
    min_separation = 0.08  # metres between cube centres at reset

    def __init__(self) -> None:
        self.target = "red"

    def state_fields(self) -> tuple[StateField, ...]:
        return (
            StateField("cube_pos", 3),
            StateField("cube_quat", 4),
            StateField("cube_rel_tcp", 3),
            StateField("cubes_pos", 3 * len(self.colors)),
            StateField("target_color", len(self.colors)),
        )

    def task_state(self, scene: SceneView) -> np.ndarray:
        pos, quat = scene.cube_pose_of(self.target)
        cubes = [scene.cube_pose_of(color)[0] for color in self.colors]
        onehot = [float(color == self.target) for color in self.colors]
        return np.concatenate([pos, quat, pos - scene.tcp_pos, *cubes, onehot])

    def object_fields(self) -> tuple[StateField, ...]:
        return tuple(StateField(f"{color}_cube", 6) for color in self.colors)

    def object_state(self, scene: SceneView) -> np.ndarray:
        """Each cube's position, absolute then from the TCP, one field per cube in colour order:
        nothing says which one the instruction names."""
        cubes = [scene.cube_pose_of(color)[0] for color in self.colors]
        return np.concatenate([np.concatenate([c, c - scene.tcp_pos]) for c in cubes])

    def reset(self, scene: SceneView, rng: np.random.Generator) -> None:
        placed: list[np.ndarray] = []
        while len(placed) < len(self.colors):
            xy = _sample_cube_xy(rng)
            if all(np.linalg.norm(xy - other) >= self.min_separation for other in placed):
                placed.append(xy)
        for color, xy in zip(self.colors, placed):
            scene.place_cube_of(color, np.array([*xy, scene.cube_half_size]), rng.uniform(-np.pi, np.pi))
        self.target = self.colors[int(rng.integers(len(self.colors)))]
        self.instruction = f"lift the {self.target} cube"
        target_xy = placed[self.colors.index(self.target)]
        scene.place_goal(np.array([*target_xy, scene.cube_half_size + self.lift_height]))

    def evaluate(self, scene: SceneView) -> TaskResult:
        pos, _ = scene.cube_pose_of(self.target)
        lift = float(pos[2] - scene.cube_half_size)
        success = lift >= self.lift_height
        reach = _shaped_distance(float(np.linalg.norm(pos - scene.tcp_pos)))
        grasped = float(scene.fingers_touch_cube_of(self.target))
        progress = float(np.clip(lift / self.lift_height, 0.0, 1.0))
        dense = 0.25 * reach + 0.25 * grasped + 0.5 * progress * grasped
        return TaskResult(1.0 if success else dense, success)


TASKS: dict[str, type] = {
    "reach": ReachTask,
    "push": PushTask,
    "pick_lift": PickLiftTask,
    "pick_color": PickColorTask,
}


def make_task(name: str) -> Task:
    if name not in TASKS:
        raise EnvConfigError(f"unknown task {name!r}; known: {sorted(TASKS)}")
    return TASKS[name]()
