"""Scripted (non-learning) controllers that solve the Franka tasks from privileged state.

They prove that each task is solvable with the env's controller, and serve as demonstrators and
as "the human" stand-in in tests. They read the state by field name through the :class:`EnvSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from protos import EnvSpec
from sim_envs.errors import EnvConfigError

APPROACH_HEIGHT = 0.08  # metres above the cube before descending
LIFT_TARGET = 0.12  # lift the cube centre this far above its resting height
CLOSE_STEPS = 3


def _yaw_of(quat: np.ndarray) -> float:
    w, x, y, z = quat
    return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))


def _wrap(angle: float, period: float) -> float:
    return float((angle + period / 2) % period - period / 2)


class ScriptedPickLift:
    """Approach from above, align with the cube's yaw, descend, close, lift; start over if the cube
    is lost (it also takes over mid-episode, from wherever the arm is, as a DAgger expert)."""

    def __init__(self, spec: EnvSpec, max_translation_m: float = 0.05, max_rotation_rad: float = 0.3):
        self.spec = spec
        self.slices = spec.state_slices()
        self.rotation = spec.action.dim == 7
        self.max_translation = max_translation_m
        self.max_rotation = max_rotation_rad
        self.reset()

    def reset(self) -> None:
        self.phase = "approach"
        self.closed_steps = 0

    def _field(self, state: np.ndarray, name: str) -> np.ndarray:
        return state[self.slices[name]]

    def act(self, obs: dict) -> np.ndarray:
        state = obs["state"]
        tcp = self._field(state, "tcp_pos")
        cube = self._field(state, "cube_pos")
        gripper = 1.0
        if self.phase == "approach":
            target = cube + np.array([0.0, 0.0, APPROACH_HEIGHT])
            if np.linalg.norm((target - tcp)[:2]) < 0.01 and abs(target[2] - tcp[2]) < 0.02:
                self.phase = "descend"
        if self.phase == "descend":
            target = cube.copy()
            if np.linalg.norm((cube - tcp)[:2]) > 0.03:
                self.phase = "approach"  # the cube was pushed away (or someone else moved the arm)
                target = cube + np.array([0.0, 0.0, APPROACH_HEIGHT])
            elif np.linalg.norm(target - tcp) < 0.01:
                self.phase = "close"
        if self.phase == "close":
            target, gripper = tcp.copy(), -1.0
            self.closed_steps += 1
            if self.closed_steps >= CLOSE_STEPS:
                self.phase = "lift"
                self.lift_from = cube[2]
        if self.phase == "lift" and np.linalg.norm(cube - tcp) > 0.04:
            self.reset()  # the cube is not in the hand (missed or dropped): start over, gripper open
            return self.act(obs)
        if self.phase == "lift":
            target = np.array([cube[0], cube[1], self.lift_from + LIFT_TARGET])
            gripper = -1.0
        action = np.zeros(self.spec.action.dim, dtype=np.float32)
        action[:3] = np.clip((target - tcp) / self.max_translation, -1.0, 1.0)
        if self.rotation:
            action[3:6] = self._align_yaw(state)
        action[-1] = gripper
        return action

    def _align_yaw(self, state: np.ndarray) -> np.ndarray:
        """Rotate about world z so the fingers close across two faces of the cube."""
        if self.phase not in ("approach", "descend"):
            return np.zeros(3)
        # The fingers close along the hand's y axis; the cube looks the same every 90 degrees.
        tcp_yaw = _yaw_of(self._field(state, "tcp_quat"))
        cube_yaw = _yaw_of(self._field(state, "cube_quat"))
        error = _wrap(cube_yaw - tcp_yaw, np.pi / 2)
        return np.array([0.0, 0.0, np.clip(error / self.max_rotation, -1.0, 1.0)])


class ScriptedReach:
    """Move the TCP straight at the goal with a proportional controller."""

    def __init__(self, spec: EnvSpec, max_translation_m: float = 0.05, max_rotation_rad: float = 0.3):
        self.spec, self.slices, self.max_translation = spec, spec.state_slices(), max_translation_m

    def reset(self) -> None:
        pass

    def act(self, obs: dict) -> np.ndarray:
        action = np.zeros(self.spec.action.dim, dtype=np.float32)
        action[:3] = np.clip(obs["state"][self.slices["goal_rel_tcp"]] / self.max_translation, -1.0, 1.0)
        action[-1] = 1.0
        return action


class ScriptedPush:
    """Get behind the cube (seen from the goal), lower the closed gripper, push through to the goal."""

    def __init__(self, spec: EnvSpec, max_translation_m: float = 0.05, max_rotation_rad: float = 0.3):
        self.spec, self.slices, self.max_translation = spec, spec.state_slices(), max_translation_m
        self.reset()

    def reset(self) -> None:
        self.phase = "behind"

    def act(self, obs: dict) -> np.ndarray:
        state = obs["state"]
        tcp, cube, goal = (state[self.slices[k]] for k in ("tcp_pos", "cube_pos", "goal_pos"))
        direction = (goal - cube)[:2]
        direction = direction / max(float(np.linalg.norm(direction)), 1e-6)
        behind = np.array([*(cube[:2] - direction * 0.06), cube[2] + 0.005])
        if self.phase == "behind":
            target = behind + np.array([0.0, 0.0, 0.06])
            if np.linalg.norm((target - tcp)[:2]) < 0.01:
                self.phase = "lower"
        if self.phase == "lower":
            target = behind
            if abs(tcp[2] - behind[2]) < 0.01:
                self.phase = "push"
        if self.phase == "push":
            # Aim through the cube at the goal; start over if the cube slid off the fingers' line.
            off_line = np.linalg.norm(np.cross(np.append(direction, 0.0), np.append((cube - tcp)[:2], 0.0)))
            if off_line > 0.02:
                self.phase = "behind"
            target = np.array([*(goal[:2] - direction * 0.03), behind[2]])
        action = np.zeros(self.spec.action.dim, dtype=np.float32)
        action[:3] = np.clip((target - tcp) / self.max_translation, -1.0, 1.0)
        action[-1] = -1.0
        return action


# PickColor's privileged state gives the named cube under the pick-lift fields: the same controller.
SCRIPTED_POLICIES = {
    "pick_lift": ScriptedPickLift,
    "pick_color": ScriptedPickLift,
    "reach": ScriptedReach,
    "push": ScriptedPush,
}


def scripted_policy(spec: EnvSpec):
    """The scripted controller for the spec's task (end-effector delta actions only)."""
    task = spec.metadata.get("task")
    if task not in SCRIPTED_POLICIES:
        raise EnvConfigError(f"no scripted controller for task {task!r}; have {sorted(SCRIPTED_POLICIES)}")
    if spec.action.kind != "ee_delta_pose+gripper":
        raise EnvConfigError(
            f"scripted controllers drive ee_delta_pose+gripper actions, not {spec.action.kind!r}"
        )
    return SCRIPTED_POLICIES[task](spec)


def expert_for(env):
    """The env's scripted expert: the suite's own where it ships one (``env.scripted_expert()``,
    e.g. MetaWorld's policies), else ours for the Franka tasks, which read the privileged state."""
    own = getattr(env, "scripted_expert", None)
    return own() if own is not None else scripted_policy(env.privileged_spec())


@dataclass
class ExpertEpisode:
    """One scripted episode as the policy saw it: its observations and the expert's actions."""

    states: np.ndarray  # float32 [T, D]: the env's state (privileged or not, as configured)
    actions: np.ndarray  # float32 [T, A]
    images: dict[str, list[np.ndarray]]  # camera -> T frames
    success: bool
    instruction: str = ""  # the episode's task text
    rewards: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # float32 [T]
    successes: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # [T]: the task was achieved


def play_expert(env, seed: int, action_noise: float = 0.0, teacher=None) -> ExpertEpisode:
    """Run the env's scripted expert (:func:`expert_for`) for one episode from ``reset(seed)``. The expert
    reads the privileged state (e.g. the goal) even when the env does not show it to the policy, and,
    standing in for a person, the scene as it is (``privileged_state(perceived=False)``), not as the
    env's perception reports it. ``teacher`` (a callable: env -> action) acts instead of the scripted
    expert: a trained state policy (``trainer.policy_teacher``), which reads what it was trained on.

    ``action_noise`` > 0 (DART, Laskey et al. 2017): the env carries out the expert's action plus
    Gaussian noise of that standard deviation (in the action's [-1, 1] units; the gripper is left
    alone), while the episode records the expert's own action as the label. The demos then show how
    to come back from the small drifts a cloned policy makes, which clean demos never visit."""
    if teacher is None:
        expert = expert_for(env)

        def teacher(env):
            return expert.act({"state": env.privileged_state(perceived=False)})

    rng = np.random.default_rng(seed)
    low, high = np.asarray(env.env_spec.action.low), np.asarray(env.env_spec.action.high)
    obs, _ = env.reset(seed=seed)
    states, actions, rewards, successes = [], [], [], []
    images: dict[str, list[np.ndarray]] = {name: [] for name in env.env_spec.camera_names}
    instruction, success = obs["instruction"], False
    for _ in range(env.env_spec.max_episode_steps):
        action = np.asarray(teacher(env), np.float32)
        states.append(obs["state"])
        actions.append(action)
        for name in images:
            images[name].append(obs["images"][name])
        executed = action
        if action_noise > 0:
            noise = rng.normal(0.0, action_noise, action.shape).astype(np.float32)
            noise[-1] = 0.0  # the gripper command stays the expert's
            executed = np.clip(action + noise, low, high).astype(np.float32)
        obs, reward, terminated, truncated, info = env.step(executed)
        rewards.append(reward)
        successes.append(bool(info.get("success", False)))
        success = successes[-1]
        if terminated or truncated:
            break
    return ExpertEpisode(
        np.stack(states),
        np.stack(actions),
        images,
        success,
        instruction,
        np.asarray(rewards, np.float32),
        np.asarray(successes, bool),
    )
