"""The MuJoCo tabletop env behind the shared env contract (a gymnasium ``Env``), for any arm the sim
has (``robot``: the Franka Panda by default, or the UR5e)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from protos import (
    EE_DELTA_POSE_GRIPPER,
    JOINT_POSITION,
    ActionSpace,
    CameraSpec,
    EnvSpec,
    ee_delta_action_space,
    pose_math,
    validate_action,
)
from protos.env_spec import INSTRUCTION_CHARSET, with_previous_action
from protos.typed_config import check_known_keys
from sim_envs.errors import EnvConfigError
from sim_envs.physics import PhysicsParams, load_physics_file, physics_between
from sim_envs.randomization import DomainRandomization, ModelRandomizer
from sim_envs.rendering import make_renderer
from sim_envs.scene import SceneConfig, build_scene_xml, load_camera_mounts
from sim_envs.scene_view import PerceivedScene, TabletopSceneView
from sim_envs.sim_arm import SIM_ARM_MODULES, sim_arm
from sim_envs.tasks import make_task

CAMERAS = ("front", "wrist")
_INSTABILITY_WARNINGS = (
    mujoco.mjtWarning.mjWARN_BADQACC,
    mujoco.mjtWarning.mjWARN_BADQVEL,
    mujoco.mjtWarning.mjWARN_BADQPOS,
)
# The robot agent's safety limits the sim can apply as the agent does (FrankaEnvConfig; 0: off).
ROBOT_LIMITS = ("max_step_translation_m", "max_step_rotation_rad", "max_target_lead_m",
                "max_orientation_change_rad", "max_rotation_lead_rad")  # fmt: skip


@dataclass(frozen=True)
class ArmCommand:
    """What the controllers track: a TCP pose (Cartesian mode) or joint targets, plus the gripper."""

    arm_target: np.ndarray  # TCP position [3] (Cartesian) or joint positions [one per arm joint]
    tcp_quat: np.ndarray | None  # TCP orientation (w, x, y, z) in Cartesian mode, else None
    gripper_width: float  # per-finger opening, 0..FINGER_TRAVEL


@dataclass(frozen=True)
class FrankaEnvConfig:
    """Everything that shapes a tabletop task env. Unknown keys are rejected by name."""

    task: str = "pick_lift"  # reach, push, pick_lift or pick_color
    robot: str = "panda"  # the arm: panda (Franka Panda) or ur5e (sim_envs.sim_arm)
    control_hz: float = 10.0  # policy steps per second
    physics_dt: float = 0.005  # MuJoCo's step (s); control_hz must divide its rate
    action_mode: str = EE_DELTA_POSE_GRIPPER  # ee_delta_pose+gripper (Cartesian impedance) or joint_position
    action_rotation: bool = True  # false: actions are translation + gripper only
    max_translation_m: float = 0.05  # what a full action moves the TCP per step
    max_rotation_rad: float = 0.3  # what a full action turns the TCP per step
    # The robot agent's safety limits, applied as it applies them (protos.pose_math's helpers), so a
    # policy learns to move as the guarded robot will: a step at most ``safety.max_translation_m`` /
    # ``max_rotation_rad`` long (0.03 m, 0.2 rad by default; a longer one keeps its direction) and a
    # target at most ``safety.max_target_lead_m`` (0.03 m) ahead of the measured TCP, which on an arm
    # that lags its target (a weak actuator) sets its speed; an orientation at most
    # ``safety.max_orientation_change_rad`` (1.6 rad) from the episode's first one and
    # ``safety.max_rotation_lead_rad`` (0.2 rad) from the measured one. 0: no such limit (the sim's
    # own controller keeps a target within the arm's ``target_lead_m`` per axis, and any orientation).
    max_step_translation_m: float = 0.0
    max_step_rotation_rad: float = 0.0  # see max_step_translation_m (0: no limit)
    max_target_lead_m: float = 0.0  # see max_step_translation_m (0: no limit)
    max_orientation_change_rad: float = 0.0  # see max_step_translation_m (0: no limit)
    max_rotation_lead_rad: float = 0.0  # see max_step_translation_m (0: no limit)
    cameras: tuple[str, ...] = CAMERAS  # front and / or wrist; [] for a state-only env
    image_height: int = 128  # camera frames' height in pixels
    image_width: int = 128  # camera frames' width in pixels
    reward_type: str = "dense"  # dense (staged, in [0, 1]) or sparse (success)
    terminate_on_success: bool = False  # end the episode at the first success
    max_episode_steps: int = 0  # 0 means the task's default
    privileged_state: bool = True  # False: proprioception only, as on the real robot (image policies)
    # With privileged_state=False: add every object's pose but nothing that names the task's target
    # (what a perception module gives a real arm); the instruction alone says which cube to lift.
    object_state: bool = False
    # The state ends with the action last given to step(), before the robot limits
    # (protos.env_spec.with_previous_action): with control latency that action is still in force for
    # part of each step, and a state without it is not Markov. A robot agent with
    # ``agent.previous_action_in_state`` appends it the same way (the action chosen, before its filter).
    previous_action_in_state: bool = False
    initial_joint_noise: float = 0.02  # uniform noise (rad) on the home joints at reset
    render_size: int = 256  # the side of render() frames (videos)
    randomization: DomainRandomization = field(default_factory=DomainRandomization)
    camera_file: str = ""  # calibrated camera poses and fields of view (rlinf-calibrate apply-to-sim)
    # Identified dynamics (rlinf-calibrate sysid); ``randomization`` then varies around them.
    physics_file: str = ""
    # A success-gated curriculum toward those dynamics: each env starts in the nominal sim and moves
    # 1/N of the way to physics_file's values after each episode it succeeds in (0: off, the
    # identified dynamics from the start). The perception offset ramps too: on its own it slowed
    # PPO's first successes (benchmarks/sysid_fit_factors.py). Evaluations turn it off
    # (``env.eval_kwargs``).
    physics_curriculum_successes: int = 0
    # Pace each step to the control period, as a real arm does: rehearses robot timing (e.g. how
    # much learning fits between steps). Each env keeps its own deadline, so envs stepped one after
    # another in a vector still take one period per vector step, like arms running side by side.
    real_time: bool = False

    def __post_init__(self) -> None:
        if self.robot not in SIM_ARM_MODULES:
            raise EnvConfigError(f"unknown robot {self.robot!r}; the sim has {sorted(SIM_ARM_MODULES)}")
        if self.action_mode not in (EE_DELTA_POSE_GRIPPER, JOINT_POSITION):
            raise EnvConfigError(
                f"action_mode must be {EE_DELTA_POSE_GRIPPER!r} or {JOINT_POSITION!r}, "
                f"got {self.action_mode!r}"
            )
        if self.reward_type not in ("dense", "sparse"):
            raise EnvConfigError(f"reward_type must be 'dense' or 'sparse', got {self.reward_type!r}")
        for name in ROBOT_LIMITS:
            if getattr(self, name) < 0:
                raise EnvConfigError(f"{name} must be >= 0 (0: no limit), got {getattr(self, name)}")
        unknown = [c for c in self.cameras if c not in CAMERAS]
        if unknown:
            raise EnvConfigError(f"unknown camera {unknown[0]!r}; this scene has {list(CAMERAS)}")
        substeps = round(1.0 / (self.control_hz * self.physics_dt))
        if substeps < 1 or abs(substeps * self.physics_dt * self.control_hz - 1.0) > 1e-6:
            raise EnvConfigError(
                f"control_hz={self.control_hz} must divide the physics rate {1 / self.physics_dt:g} Hz"
            )
        if self.object_state and self.privileged_state:
            raise EnvConfigError(
                "object_state=true needs privileged_state=false (the privileged state already holds "
                "the objects, and the task's target)"
            )
        if self.physics_curriculum_successes < 0:
            raise EnvConfigError(
                f"physics_curriculum_successes must be >= 0 (0: off), got {self.physics_curriculum_successes}"
            )
        latency_s = self.randomization.control_latency_ms[1] / 1000.0
        if latency_s >= 1.0 / self.control_hz:
            raise EnvConfigError(
                f"randomization.control_latency_ms up to {latency_s * 1000:g} ms must be shorter "
                f"than one control period ({1000 / self.control_hz:g} ms)"
            )

    @classmethod
    def from_overrides(cls, base: FrankaEnvConfig | None = None, **overrides: Any) -> FrankaEnvConfig:
        """Apply keyword overrides, naming any unknown key."""
        base = base or cls()
        check_known_keys(cls, overrides, "env config", EnvConfigError)
        if "randomization" in overrides:
            overrides["randomization"] = DomainRandomization.from_any(overrides["randomization"])
        if "cameras" in overrides:
            overrides["cameras"] = tuple(overrides["cameras"])
        return replace(base, **overrides)

    @property
    def substeps(self) -> int:
        return round(1.0 / (self.control_hz * self.physics_dt))


class FrankaEnv(gym.Env):
    """A tabletop task (reach, push, pick-lift or pick-colour) in MuJoCo, on the Panda or the UR5e.

    The world frame is the arm's base frame, as a real arm reports its poses; the TCP target stays
    inside the arm's workspace box and within its ``target_lead_m`` of the TCP (its embodiment).

    Observations follow the contract in :mod:`protos`; ``env_spec`` describes them. Actions are
    validated before they reach the physics: a NaN, a wrong shape or an out-of-bounds value raises
    :class:`protos.ContractError`.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        task: str | None = None,
        render_mode: str | None = None,
        config: FrankaEnvConfig | None = None,
        **overrides: Any,
    ) -> None:
        if task is not None:
            overrides["task"] = task
        self.cfg = FrankaEnvConfig.from_overrides(config, **overrides)
        if render_mode not in (None, "rgb_array"):
            raise EnvConfigError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self.task = make_task(self.cfg.task)
        self.arm = sim_arm(self.cfg.robot)
        self._workspace = (np.array(self.embodiment.workspace_low), np.array(self.embodiment.workspace_high))
        arm_control = "cartesian" if self.cfg.action_mode == EE_DELTA_POSE_GRIPPER else JOINT_POSITION
        scene_cfg = SceneConfig(
            robot=self.cfg.robot,
            with_cube=self.task.with_cube,
            extra_cubes=getattr(self.task, "extra_cubes", ()),
            physics_dt=self.cfg.physics_dt,
            arm_control=arm_control,
            offscreen_width=max(256, self.cfg.image_width, self.cfg.render_size),
            offscreen_height=max(256, self.cfg.image_height, self.cfg.render_size),
            camera_mounts=load_camera_mounts(self.cfg.camera_file) if self.cfg.camera_file else (),
        )
        self.model = mujoco.MjModel.from_xml_string(build_scene_xml(scene_cfg))
        self.data = mujoco.MjData(self.model)
        self.scene = TabletopSceneView(self.model, self.data, scene_cfg.cube_half_size, self.arm)
        self.randomizer = ModelRandomizer(self.model, self.cfg.randomization)
        self.curriculum_successes = 0  # episodes succeeded in, which move the curriculum on
        self._episode_succeeded = False
        self.set_physics(
            load_physics_file(self.cfg.physics_file) if self.cfg.physics_file else PhysicsParams()
        )
        self.env_spec = self._build_spec()
        self.max_episode_steps = self.env_spec.max_episode_steps
        self.action_space = gym.spaces.Box(
            self.env_spec.action.low_array(), self.env_spec.action.high_array(), dtype=np.float32
        )
        self.observation_space = self._build_observation_space()
        self._renderer = None
        self._display_renderer = None
        self._gripper_ctrl = self.model.actuator("act_gripper").id
        self._target_mocap = self.model.body("tcp_target").mocapid[0] if arm_control == "cartesian" else -1
        self._latency_substeps = 0
        # What observations read: the scene with the episode's perception offset on object positions.
        self.perceived = PerceivedScene(self.scene, np.zeros(3))
        self._steps = 0
        self._reset_command()

    @property
    def embodiment(self):
        """The arm as data (``protos.embodiment``): its joints, limits, box and proprioception."""
        return self.arm.embodiment

    # -- contract ------------------------------------------------------------------------------
    def _build_spec(self) -> EnvSpec:
        cfg = self.cfg
        if cfg.object_state and not self.task.object_fields():
            raise EnvConfigError(f"object_state=true: task {cfg.task!r} has no objects to show")
        if cfg.action_mode == EE_DELTA_POSE_GRIPPER:
            action = ee_delta_action_space(rotation=cfg.action_rotation)
        else:
            action = ActionSpace(
                kind=JOINT_POSITION,
                names=(*self.arm.arm_joints, "gripper"),
                low=(*self.embodiment.joint_lower, -1.0),
                high=(*self.embodiment.joint_upper, 1.0),
            )
        cameras = tuple(
            CameraSpec(name, cfg.image_height, cfg.image_width, cfg.control_hz) for name in cfg.cameras
        )
        spec = EnvSpec(
            name=f"rlinf/{self.arm.id_prefix}{''.join(p.title() for p in cfg.task.split('_'))}-v0",
            cameras=cameras,
            state_fields=self.embodiment.state_fields + self._shown_task_fields(),
            action=action,
            control_hz=cfg.control_hz,
            instruction=self.task.instruction,
            max_episode_steps=cfg.max_episode_steps or self.task.max_episode_steps,
            metadata={
                "robot": self.arm.spec_robot,
                "simulator": "mujoco",
                "task": cfg.task,
                "reward_type": cfg.reward_type,
            },
        )
        return with_previous_action(spec) if cfg.previous_action_in_state else spec

    def _build_observation_space(self) -> gym.spaces.Dict:
        images = {
            cam.name: gym.spaces.Box(0, 255, cam.shape, dtype=np.uint8) for cam in self.env_spec.cameras
        }
        return gym.spaces.Dict(
            {
                "images": gym.spaces.Dict(images),
                "state": gym.spaces.Box(-np.inf, np.inf, (self.env_spec.state_dim,), np.float32),
                "instruction": gym.spaces.Text(max_length=256, charset=INSTRUCTION_CHARSET),
            }
        )

    # -- gymnasium API -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        rng = self.np_random
        if self._episode_succeeded:
            self.curriculum_successes += 1
            self._episode_succeeded = False
        if self.cfg.physics_curriculum_successes:
            self._use_physics(self.curriculum_physics())
        mujoco.mj_resetData(self.model, self.data)
        drawn = self.randomizer.apply(rng)
        self._latency_substeps = round(drawn.control_latency_ms / 1000.0 / self.cfg.physics_dt)
        self.perceived = PerceivedScene(self.scene, drawn.object_position_offset_m)
        emb = self.embodiment
        noise = rng.uniform(-1, 1, emb.num_joints) * self.cfg.initial_joint_noise
        arm = np.clip(np.array(emb.home_joints) + noise, emb.joint_lower, emb.joint_upper)
        self.scene.set_arm(arm, gripper_width=2 * self.arm.finger_travel_m)
        self.task.reset(self.scene, rng)
        mujoco.mj_forward(self.model, self.data)
        self._next_tick = time.monotonic() + 1.0 / self.cfg.control_hz
        self._steps = 0
        self._reset_command()
        return self._observation(), {"success": False}

    def step(self, action):
        action = validate_action(self.env_spec, action)
        self._previous_action = np.asarray(action, np.float32)
        previous = self._command
        self._command = self._command_from_action(action)
        # Control latency: the previous command stays in force for the first substeps.
        latency = self._latency_substeps
        if latency:
            self._apply_command(previous)
            mujoco.mj_step(self.model, self.data, nstep=latency)
        self._apply_command(self._command)
        mujoco.mj_step(self.model, self.data, nstep=self.cfg.substeps - latency)
        self._steps += 1
        if self.cfg.real_time:
            self._wait_for_tick()
        if any(self.data.warning[w].number > 0 for w in _INSTABILITY_WARNINGS):
            # MuJoCo hit a numerical blow-up and reset its state: end the episode, flag it.
            return self._observation(), 0.0, False, True, {"success": False, "physics_unstable": True}
        result = self.task.evaluate(self.scene)
        self._episode_succeeded |= bool(result.success)
        reward = result.dense_reward if self.cfg.reward_type == "dense" else float(result.success)
        terminated = bool(result.success and self.cfg.terminate_on_success)
        truncated = self._steps >= self.max_episode_steps
        return self._observation(), float(reward), terminated, truncated, {"success": result.success}

    def _wait_for_tick(self) -> None:
        now = time.monotonic()
        if self._next_tick > now:
            time.sleep(self._next_tick - now)
        self._next_tick = max(now, self._next_tick) + 1.0 / self.cfg.control_hz

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        if self._display_renderer is None:
            size = self.cfg.render_size
            self._display_renderer = make_renderer(self.model, size, size)
        self._display_renderer.update_scene(self.data, camera="front")
        return self._display_renderer.render()

    def close(self) -> None:
        for renderer in (self._renderer, self._display_renderer):
            if renderer is not None:
                renderer.close()
        self._renderer = self._display_renderer = None

    # -- physics -------------------------------------------------------------------------------
    def set_physics(self, physics: PhysicsParams) -> None:
        """Use these dynamics from the next reset on (the config's randomisation varies around them;
        under ``physics_curriculum_successes`` they are where the curriculum ends)."""
        latency_ms = physics.around(self.cfg.randomization).control_latency_ms[1]
        if latency_ms >= 1000.0 / self.cfg.control_hz:
            raise EnvConfigError(
                f"control latency up to {latency_ms:g} ms (physics file plus randomisation) must be "
                f"shorter than one control period ({1000 / self.cfg.control_hz:g} ms)"
            )
        self.target_physics = physics
        self._use_physics(self.curriculum_physics())

    def curriculum_physics(self) -> PhysicsParams:
        """The dynamics this env's next episode runs: the target, or with the curriculum on, the
        part of the way from the nominal sim that this env's successes have earned."""
        needed = self.cfg.physics_curriculum_successes
        if not needed:
            return self.target_physics
        return physics_between(PhysicsParams(), self.target_physics, self.curriculum_successes / needed)

    def _use_physics(self, physics: PhysicsParams) -> None:
        self.physics = physics
        self.randomizer.cfg = physics.around(self.cfg.randomization)

    def restore_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Put the arm (and the cube, where ``cube_pos``/``cube_quat`` are given) where a recorded
        state says, at rest, with the controller holding there. Call after :meth:`reset`."""
        arm = np.asarray(state["joint_pos"], np.float64)
        self.scene.set_arm(arm, float(np.ravel(state["gripper_width"])[0]))
        if "joint_vel" in state:
            self.data.qvel[: len(arm)] = np.asarray(state["joint_vel"], np.float64)
        if self.task.with_cube:
            cube = self.model.joint("cube_joint").qposadr[0]
            if "cube_pos" in state:  # as perceived: the cube is the perception offset away from it
                observed = np.asarray(state["cube_pos"], np.float64)
                self.data.qpos[cube : cube + 3] = observed - self.perceived.offset
                quat = np.asarray(state.get("cube_quat", (1.0, 0.0, 0.0, 0.0)), np.float64)
                self.data.qpos[cube + 3 : cube + 7] = quat / np.linalg.norm(quat)
            else:  # where it was is unknown: out of the arm's way, so the replay does not hit it
                self.data.qpos[cube : cube + 3] = (0.45, 0.62, self.scene.cube_half_size)
        mujoco.mj_forward(self.model, self.data)
        self._reset_command()

    # -- control -------------------------------------------------------------------------------
    def commanded_tcp_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Where the Cartesian controller is pulling the TCP (the base that action deltas move):
        position and (w, x, y, z) orientation."""
        if self.cfg.action_mode != EE_DELTA_POSE_GRIPPER:
            raise EnvConfigError("commanded_tcp_pose needs the end-effector action mode")
        assert self._command.tcp_quat is not None
        return np.array(self._command.arm_target), np.array(self._command.tcp_quat)

    def hold_current_pose(self) -> None:
        """Retarget the arm to where it is now (keeping the gripper command): a stop, as on a real arm."""
        if self.cfg.action_mode == EE_DELTA_POSE_GRIPPER:
            self._command = ArmCommand(self.scene.tcp_pos, self.scene.tcp_quat, self._command.gripper_width)
        else:
            self._command = ArmCommand(self.scene.arm_qpos.copy(), None, self._command.gripper_width)
        self._apply_command(self._command)

    def _reset_command(self) -> None:
        open_width = self.arm.finger_travel_m
        if self.cfg.action_mode == EE_DELTA_POSE_GRIPPER:
            self._command = ArmCommand(self.scene.tcp_pos, self.scene.tcp_quat, open_width)
            self._start_rotation = pose_math.quat_to_matrix(self.scene.tcp_quat)
        else:
            self._command = ArmCommand(self.scene.arm_qpos.copy(), None, open_width)
        self._apply_command(self._command)
        self._previous_action = np.zeros(self.env_spec.action.dim, np.float32)

    def _command_from_action(self, action: np.ndarray) -> ArmCommand:
        gripper = (float(action[-1]) + 1.0) / 2.0 * self.arm.finger_travel_m
        if self.cfg.action_mode == JOINT_POSITION:
            return ArmCommand(action[:-1].astype(np.float64), None, gripper)
        # Deltas accumulate on the previous target, kept in the workspace box and close to the TCP.
        delta = action[:3].astype(np.float64) * self.cfg.max_translation_m
        if self.cfg.max_step_translation_m > 0:
            delta = pose_math.cap_norm(delta, self.cfg.max_step_translation_m)
        if self.cfg.max_target_lead_m > 0:
            lead = self._command.arm_target - self.scene.tcp_pos
            delta = pose_math.shorten_into_ball(lead, delta, self.cfg.max_target_lead_m)
        target_pos = np.clip(self._command.arm_target + delta, *self._workspace)
        tcp, lead = self.scene.tcp_pos, self.embodiment.target_lead_m
        target_pos = tcp + np.clip(target_pos - tcp, -lead, lead)
        target_quat = self._command.tcp_quat
        if self.cfg.action_rotation:
            rotvec = action[3:6].astype(np.float64) * self.cfg.max_rotation_rad  # world-frame axis-angle
            if self.cfg.max_orientation_change_rad > 0 or self.cfg.max_rotation_lead_rad > 0:
                return ArmCommand(target_pos, self._guarded_rotation(rotvec, target_quat), gripper)
            if self.cfg.max_step_rotation_rad > 0:
                rotvec = pose_math.cap_norm(rotvec, self.cfg.max_step_rotation_rad)
            angle = float(np.linalg.norm(rotvec))
            if angle > 1e-9:
                delta_quat, rotated = np.zeros(4), np.zeros(4)
                mujoco.mju_axisAngle2Quat(delta_quat, rotvec / angle, angle)
                mujoco.mju_mulQuat(rotated, delta_quat, target_quat)
                target_quat = rotated
        return ArmCommand(target_pos, target_quat, gripper)

    def _guarded_rotation(self, rotvec: np.ndarray, target_quat: np.ndarray) -> np.ndarray:
        """The target orientation after ``rotvec`` under the agent's orientation limits (as its
        safety filter turns the commanded orientation, from the episode's first measured one)."""
        off = float("inf")
        base = pose_math.quat_to_matrix(target_quat)
        step, _ = pose_math.guarded_rotation_step(
            rotvec, base, self._start_rotation, pose_math.quat_to_matrix(self.scene.tcp_quat),
            self.cfg.max_step_rotation_rad or off, self.cfg.max_orientation_change_rad or off,
            self.cfg.max_rotation_lead_rad or off,
        )  # fmt: skip
        return pose_math.matrix_to_quat(pose_math.rotvec_to_matrix(step) @ base)

    def _apply_command(self, command: ArmCommand) -> None:
        if command.tcp_quat is None:
            self.data.ctrl[: self.arm.num_joints] = command.arm_target
        else:
            self.data.mocap_pos[self._target_mocap] = command.arm_target
            self.data.mocap_quat[self._target_mocap] = command.tcp_quat
        self.data.ctrl[self._gripper_ctrl] = command.gripper_width

    # -- observation ---------------------------------------------------------------------------
    def _shown_task_fields(self) -> tuple:
        if self.cfg.privileged_state:
            return self.task.state_fields()
        return self.task.object_fields() if self.cfg.object_state else ()

    def _observation(self) -> dict[str, Any]:
        if self.cfg.privileged_state:
            state = self.privileged_state()
        elif self.cfg.object_state:
            objects = self.task.object_state(self.perceived)
            state = np.concatenate([self._proprio(), objects]).astype(np.float32)
        else:
            state = self._proprio()
        if self.cfg.previous_action_in_state:
            state = np.concatenate([state, self._previous_action]).astype(np.float32)
        return {"images": self._render_cameras(), "state": state, "instruction": self.task.instruction}

    def _proprio(self) -> np.ndarray:
        scene = self.scene
        parts = [scene.arm_qpos, scene.arm_qvel, scene.tcp_pos, scene.tcp_quat, [scene.gripper_width]]
        return np.concatenate(parts).astype(np.float32)

    def privileged_state(self, perceived: bool = True) -> np.ndarray:
        """Proprioception plus the task's object state (what a scripted expert needs), whatever the
        config shows the policy: as perception reports it, or (``perceived=False``) as it is, which is
        what a person teleoperating the robot sees."""
        scene = self.perceived if perceived else self.scene
        return np.concatenate([self._proprio(), self.task.task_state(scene)]).astype(np.float32)

    @property
    def previous_action(self) -> np.ndarray:
        """The action last applied (zeros before an episode's first), whether or not the state shows it."""
        return self._previous_action.copy()

    def privileged_spec(self) -> EnvSpec:
        """The spec that describes :meth:`privileged_state`."""
        return replace(self.env_spec, state_fields=self.embodiment.state_fields + self.task.state_fields())

    def _render_cameras(self) -> dict[str, np.ndarray]:
        if not self.cfg.cameras:
            return {}
        if self._renderer is None:
            self._renderer = make_renderer(self.model, self.cfg.image_height, self.cfg.image_width)
        images = {}
        for name in self.cfg.cameras:
            self._renderer.update_scene(self.data, camera=name)
            images[name] = self._renderer.render()
        return images
