"""Franka (Panda / FR3) driver over pylibfranka: Cartesian impedance, the Franka gripper, cameras.

Threads:
- a 1 kHz thread owns the realtime control handle. It reads the robot state and moves a smooth
  setpoint toward the latest target, with speed and acceleration limits, so the 10-30 Hz policy
  never commands a jump (libfranka's reflexes reject velocity discontinuities);
- a gripper thread issues blocking ``move`` / ``grasp`` calls for the newest requested width;
- each camera captures on its own thread.

The control loop calls ``apply`` / ``hold`` once per control period; they only set the target.
``plf`` (the pylibfranka module) is injectable: tests use a stand-in with the same API, and the same
code runs against a simulator of the libfranka network protocol (see ``shared/HARDWARE_TESTING.md``).
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
from robot_agent.cameras import Camera, CameraConfig, CameraError, make_camera
from robot_agent.drivers.base import (
    DriverCapabilities,
    DriverError,
    DriverObservation,
    RobotDriver,
    StepOutcome,
)
from robot_agent.drivers.pose_math import (
    matrix_to_quat,
    matrix_to_rotvec,
    pose_from_column_major,
    pose_to_column_major,
    rotvec_to_matrix,
)
from robot_agent.safety import ArmScaling

log = logging.getLogger(__name__)

# The same proprioception layout as the sim twin, so a policy moves between them unchanged.
STATE_FIELDS = (
    StateField("joint_pos", 7),
    StateField("joint_vel", 7),
    StateField("tcp_pos", 3),
    StateField("tcp_quat", 4),
    StateField("gripper_width", 1),
)
HOME_JOINTS = (0.0, -math.pi / 4, 0.0, -3 * math.pi / 4, 0.0, math.pi / 2, math.pi / 4)


@dataclass(frozen=True)
class FrankaConfig:
    """One Franka arm. Action deltas are scaled by ``max_translation_m`` / ``max_rotation_rad`` per step."""

    host: str = "172.16.0.2"
    control_hz: float = 10.0
    instruction: str = ""
    max_episode_steps: int = 200
    cameras: tuple[CameraConfig, ...] = ()
    home_joints: tuple[float, ...] = HOME_JOINTS
    home_duration_s: float = 4.0
    max_translation_m: float = 0.05
    max_rotation_rad: float = 0.3
    max_target_lead_m: float = 0.1  # the target never runs further ahead of the TCP than this
    # The 1 kHz setpoint profile. Franka hardware refused a +x ramp at 2.5 m/s^2 / 500 m/s^3 and ran one
    # at 1.5 m/s^2 / 200 m/s^3 cleanly (franka-sim's calibration notes): these stay well inside that.
    setpoint_gain: float = 6.0  # 1/s: position error -> velocity
    velocity_gain: float = 25.0  # 1/s: velocity error -> acceleration
    max_speed_mps: float = 0.25
    max_accel_mps2: float = 1.0
    max_jerk_mps3: float = 100.0
    max_angular_speed: float = 0.8  # rad/s
    max_angular_accel: float = 2.0  # rad/s^2
    max_angular_jerk: float = 150.0  # rad/s^3
    cartesian_stiffness: tuple[float, ...] = (2000.0, 2000.0, 2000.0, 150.0, 150.0, 150.0)
    gripper_max_width_m: float = 0.08
    gripper_speed_mps: float = 0.1
    gripper_force_n: float = 20.0
    gripper_tolerance_m: float = 0.005
    camera_max_age_s: float = 0.2

    def __post_init__(self) -> None:
        cameras = tuple(c if isinstance(c, CameraConfig) else CameraConfig(**c) for c in self.cameras)
        object.__setattr__(self, "cameras", cameras)
        if len(self.home_joints) != 7:
            raise ValueError(f"home_joints needs 7 values, got {len(self.home_joints)}")
        if len(self.cartesian_stiffness) != 6:
            raise ValueError(f"cartesian_stiffness needs 6 values, got {len(self.cartesian_stiffness)}")


def import_pylibfranka() -> Any:
    try:
        import pylibfranka
    except ImportError as exc:
        raise DriverError(f"the franka driver needs pylibfranka: pip install '.[franka]' ({exc})") from None
    return pylibfranka


class SetpointFilter:
    """Moves a Cartesian setpoint toward a target with bounded speed, acceleration and jerk (1 kHz).

    A cascade: position error -> desired velocity -> desired acceleration, each clipped, and the
    acceleration itself changes by at most ``jerk * dt`` per cycle. libfranka checks the joint-space
    jerk its inverse kinematics makes of the Cartesian commands; a profile without a jerk limit is
    refused (``cartesian_motion_generator_joint_acceleration_discontinuity``).
    """

    def __init__(self, config: FrankaConfig, position: np.ndarray, rotation: np.ndarray) -> None:
        self.config = config
        self.stop_at(position, rotation)

    def step(self, dt: float, target_position: np.ndarray, target_rotation: np.ndarray) -> None:
        cfg = self.config
        self.velocity, self.acceleration = _jerk_limited(
            self.velocity,
            self.acceleration,
            target_position - self.position,
            dt,
            (cfg.max_speed_mps, cfg.max_accel_mps2, cfg.max_jerk_mps3),
            (cfg.setpoint_gain, cfg.velocity_gain),
        )
        self.position = self.position + self.velocity * dt
        error = matrix_to_rotvec(target_rotation @ self.rotation.T)
        self.angular_velocity, self.angular_acceleration = _jerk_limited(
            self.angular_velocity,
            self.angular_acceleration,
            error,
            dt,
            (cfg.max_angular_speed, cfg.max_angular_accel, cfg.max_angular_jerk),
            (cfg.setpoint_gain, cfg.velocity_gain),
        )
        self.rotation = rotvec_to_matrix(self.angular_velocity * dt) @ self.rotation

    def stop_at(self, position: np.ndarray, rotation: np.ndarray) -> None:
        self.position, self.rotation = position.copy(), rotation.copy()
        self.velocity, self.acceleration = np.zeros(3), np.zeros(3)
        self.angular_velocity, self.angular_acceleration = np.zeros(3), np.zeros(3)


def _jerk_limited(velocity, acceleration, error, dt, limits, gains):
    max_speed, max_accel, max_jerk = limits
    position_gain, velocity_gain = gains
    desired_velocity = _clip_norm(position_gain * error, max_speed)
    desired_accel = _clip_norm(velocity_gain * (desired_velocity - velocity), max_accel)
    acceleration = acceleration + _clip_norm(desired_accel - acceleration, max_jerk * dt)
    return velocity + acceleration * dt, acceleration


def _clip_norm(vector: np.ndarray, max_norm: float) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector * (max_norm / norm) if norm > max_norm else vector


@dataclass
class _ArmState:
    q: np.ndarray = field(default_factory=lambda: np.zeros(7))
    dq: np.ndarray = field(default_factory=lambda: np.zeros(7))
    position: np.ndarray = field(default_factory=lambda: np.zeros(3))
    rotation: np.ndarray = field(default_factory=lambda: np.eye(3))


class FrankaDriver(RobotDriver):
    """A Franka arm under Cartesian impedance, behind the driver interface."""

    kind = "franka"

    def __init__(
        self, config: FrankaConfig | None = None, plf: Any = None, camera_seams: dict | None = None
    ) -> None:
        self.config = cfg = config or FrankaConfig()
        self._plf = plf
        self.spec = EnvSpec(
            name="franka/real",
            cameras=tuple(CameraSpec(c.name, c.height, c.width, c.fps) for c in cfg.cameras),
            state_fields=STATE_FIELDS,
            action=ee_delta_action_space(rotation=True),
            control_hz=cfg.control_hz,
            instruction=cfg.instruction,
            max_episode_steps=cfg.max_episode_steps,
            metadata={"robot": "franka", "host": cfg.host},
        )
        self.capabilities = DriverCapabilities(reset=False, reward=False, gripper=True)
        self.arms = (ArmScaling(cfg.max_translation_m, cfg.max_rotation_rad),)
        self.cameras: list[Camera] = [
            make_camera(c, **(camera_seams or {}).get(c.name, {})) for c in cfg.cameras
        ]
        self._robot: Any = None
        self._gripper: Any = None
        self._lock = threading.Lock()
        self._state = _ArmState()
        self._target_position: np.ndarray | None = None
        self._target_rotation: np.ndarray | None = None
        self._filter: SetpointFilter | None = None
        self._rt_thread: threading.Thread | None = None
        self._rt_stop = threading.Event()
        self._rt_error: str | None = None
        self._gripper_width = cfg.gripper_max_width_m
        self._gripper_wanted = cfg.gripper_max_width_m
        self._gripper_wake = threading.Event()
        self._closing = threading.Event()
        self._gripper_thread: threading.Thread | None = None
        self._holding = False
        self._stopped = False
        self.rt_overruns = 0

    # -- connection ----------------------------------------------------------------------------------
    def connect(self) -> None:
        """Connect to the arm, gripper and cameras. Motion control starts with the first action."""
        if self._robot is not None:
            return
        plf = self._plf = self._plf or import_pylibfranka()
        try:
            self._robot = plf.Robot(self.config.host, plf.RealtimeConfig.kIgnore)
            self._robot.set_cartesian_impedance(list(self.config.cartesian_stiffness))
            self._gripper = plf.Gripper(self.config.host)
        except Exception as exc:  # the vendor library raises its own types
            raise DriverError(f"cannot connect to the Franka at {self.config.host}: {exc}") from None
        for camera in self.cameras:
            camera.start()
        self._read_idle_state()
        self._gripper_thread = threading.Thread(target=self._gripper_loop, name="franka-gripper", daemon=True)
        self._gripper_thread.start()

    def _read_idle_state(self) -> None:
        """Read the state outside a motion (``read_once`` is only allowed when no control runs)."""
        try:
            state = self._robot.read_once()
        except Exception as exc:
            raise DriverError(f"cannot read the Franka's state: {exc}") from None
        self._publish(state, *pose_from_column_major(state.O_T_EE))

    def _moving(self) -> bool:
        return self._rt_thread is not None and self._rt_thread.is_alive()

    def _start_cartesian(self) -> None:
        self._rt_stop.clear()
        self._rt_error = None
        ready = threading.Event()
        self._rt_thread = threading.Thread(
            target=self._rt_loop, args=(ready,), name="franka-1khz", daemon=True
        )
        self._rt_thread.start()
        if not ready.wait(5.0) or self._rt_error:
            raise DriverError(f"Cartesian impedance control did not start: {self._rt_error or 'timeout'}")

    def _stop_cartesian(self) -> None:
        self._rt_stop.set()
        if self._rt_thread is not None:
            self._rt_thread.join(2.0)
            self._rt_thread = None

    # -- the 1 kHz loop ----------------------------------------------------------------------------------
    def _rt_loop(self, ready: threading.Event) -> None:
        plf = self._plf
        try:
            control = self._robot.start_cartesian_pose_control(plf.ControllerMode.CartesianImpedance)
            state, _ = control.readOnce()
            position, rotation = pose_from_column_major(state.O_T_EE)
            self._publish(state, position, rotation)
            self._filter = SetpointFilter(self.config, position, rotation)
            with self._lock:
                self._target_position, self._target_rotation = position.copy(), rotation.copy()
            ready.set()
            while True:
                state, period = control.readOnce()
                dt = _seconds(period) or 0.001
                if dt > 0.0015:
                    self.rt_overruns += 1  # this thread missed a 1 ms cycle (GIL, scheduler)
                position, rotation = pose_from_column_major(state.O_T_EE)
                self._publish(state, position, rotation)
                with self._lock:
                    target_position, target_rotation = self._target_position, self._target_rotation
                self._filter.step(dt, target_position, target_rotation)
                command = plf.CartesianPose(
                    pose_to_column_major(self._filter.position, self._filter.rotation)
                )
                if self._rt_stop.is_set():
                    command.motion_finished = True
                    control.writeOnce(command)
                    return
                control.writeOnce(command)
        except Exception as exc:
            self._rt_error = str(exc)
            log.error("franka realtime loop stopped: %s", exc)
            ready.set()

    def _publish(self, state: Any, position: np.ndarray, rotation: np.ndarray) -> None:
        with self._lock:
            self._state = _ArmState(
                np.asarray(state.q, float), np.asarray(state.dq, float), position, rotation
            )

    # -- the gripper ---------------------------------------------------------------------------------------
    def _gripper_loop(self) -> None:
        cfg = self.config
        commanded = None
        while not self._closing.is_set():
            self._gripper_wake.wait(0.1)
            self._gripper_wake.clear()
            if self._gripper is None or self._closing.is_set():
                return
            wanted = self._gripper_wanted
            try:
                if commanded is None or abs(wanted - commanded) > cfg.gripper_tolerance_m:
                    commanded = wanted
                    if wanted < commanded_open_threshold(cfg):
                        # Closing: grasp with force, accepting any width (the object decides it).
                        self._gripper.grasp(wanted, cfg.gripper_speed_mps, cfg.gripper_force_n, 0.08, 0.08)
                    else:
                        self._gripper.move(wanted, cfg.gripper_speed_mps)
                self._gripper_width = float(self._gripper.read_once().width)
            except Exception as exc:
                log.warning("gripper: %s", exc)

    # -- driver interface ------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        """Clear any reflex, home the arm (a smooth joint motion) and open the gripper."""
        del seed  # a real scene cannot be reseeded
        self._ensure_connected()
        self._stop_cartesian()
        if self._rt_error is not None:
            self.recover()
        try:
            self._move_joints(np.asarray(self.config.home_joints))
        except Exception as exc:
            raise DriverError(f"homing failed: {exc}") from None
        self._read_idle_state()
        self._gripper_wanted = self.config.gripper_max_width_m
        self._gripper_wake.set()
        self._holding = False

    def _move_joints(self, goal: np.ndarray) -> None:
        plf = self._plf
        control = self._robot.start_joint_position_control(plf.ControllerMode.JointImpedance)
        state, _ = control.readOnce()
        start = np.asarray(state.q, float)
        duration = self.config.home_duration_s
        elapsed = 0.0
        while True:
            state, period = control.readOnce()
            elapsed += _seconds(period) or 0.001
            phase = min(elapsed / duration, 1.0)
            blend = 0.5 * (1.0 - math.cos(math.pi * phase))  # zero velocity at both ends
            command = plf.JointPositions((start + blend * (goal - start)).tolist())
            if phase >= 1.0:
                command.motion_finished = True
                control.writeOnce(command)
                return
            control.writeOnce(command)

    def observe(self) -> DriverObservation:
        self._ensure_connected()
        if not self._moving():
            self._read_idle_state()
        with self._lock:
            state = self._state
        vector = np.concatenate(
            [state.q, state.dq, state.position, matrix_to_quat(state.rotation), [self._gripper_width / 2]]
        ).astype(np.float32)  # gripper_width is per finger, as in the sim twin
        images, stamps = {}, {}
        for camera in self.cameras:
            try:
                frame = camera.read_latest(self.config.camera_max_age_s)
            except CameraError as exc:
                raise DriverError(str(exc)) from None
            images[camera.config.name], stamps[camera.config.name] = frame.image, frame.capture_ns
        return DriverObservation(vector, images, stamps)

    def apply(self, action: np.ndarray) -> StepOutcome:
        self._ensure_connected()
        if self._rt_error is not None:
            raise DriverError(f"the Franka stopped: {self._rt_error}; the next episode reset recovers it")
        if not self._moving():
            self._start_cartesian()  # from the current pose: the first target is where the arm is
        cfg = self.config
        with self._lock:
            measured = self._state.position
            position = self._target_position + np.asarray(action[:3], float) * cfg.max_translation_m
            position = measured + np.clip(position - measured, -cfg.max_target_lead_m, cfg.max_target_lead_m)
            rotation = (
                rotvec_to_matrix(np.asarray(action[3:6], float) * cfg.max_rotation_rad)
                @ self._target_rotation
            )
            self._target_position, self._target_rotation = position, rotation
        self._gripper_wanted = (float(action[6]) + 1.0) / 2.0 * cfg.gripper_max_width_m
        self._gripper_wake.set()
        self._holding = False
        return StepOutcome()

    def hold(self) -> None:
        if not self._moving() or self._stopped:
            return  # idle: the robot holds its pose by itself
        if not self._holding:
            with self._lock:
                self._target_position = self._state.position.copy()
                self._target_rotation = self._state.rotation.copy()
            self._holding = True

    def tcp_targets(self) -> tuple[np.ndarray, ...] | None:
        with self._lock:
            return None if self._target_position is None else (self._target_position.copy(),)

    def estop(self) -> None:
        """Stop the motion now; the arm stays stopped until the agent is restarted."""
        self._stopped = True
        self._rt_stop.set()
        if self._robot is not None:
            try:
                self._robot.stop()
            except Exception as exc:
                log.error("robot.stop() failed: %s", exc)

    def recover(self) -> None:
        """After a reflex (e.g. a collision), clear the error; motion resumes with the next action."""
        self._stop_cartesian()
        try:
            self._robot.automatic_error_recovery()
        except Exception as exc:
            raise DriverError(f"automatic error recovery failed: {exc}") from None
        self._rt_error = None

    def close(self) -> None:
        self._closing.set()
        self._gripper_wake.set()
        self._stop_cartesian()
        if self._gripper_thread is not None:
            self._gripper_thread.join(2.0)
        for camera in self.cameras:
            camera.stop()
        self._robot, self._gripper = None, None

    def _ensure_connected(self) -> None:
        if self._stopped:
            raise DriverError("the arm is e-stopped; restart the agent")
        if self._robot is None:
            self.connect()

def commanded_open_threshold(config: FrankaConfig) -> float:
    """Requests narrower than this close the gripper with force (grasp); wider ones move it open."""
    return 0.5 * config.gripper_max_width_m


def _seconds(period: Any) -> float:
    """libfranka's ``Duration`` (``to_sec()``, or ``to_msec()``) -> seconds."""
    if hasattr(period, "to_sec"):
        return float(period.to_sec())
    if hasattr(period, "to_msec"):
        return float(period.to_msec()) / 1000.0
    return float(period)


__all__ = ["FrankaConfig", "FrankaDriver", "SetpointFilter", "import_pylibfranka"]
