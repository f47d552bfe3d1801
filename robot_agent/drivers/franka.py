"""Franka (Panda / FR3) driver over pylibfranka: Cartesian impedance, the Franka gripper, cameras.

Where things run (see ``franka_process.py`` for why the vendor calls are in processes of their own):
- the arm process owns the realtime control handle. At 1 kHz it reads the robot state and moves a
  setpoint toward the latest target with speed, acceleration and jerk limits, so the 10-30 Hz
  policy never commands a jump (libfranka's reflexes refuse discontinuities);
- the gripper process issues the blocking ``move`` / ``grasp`` calls for the newest width;
- each camera captures on its own thread.

The control loop calls ``apply`` / ``hold`` once per control period; they only move the target.
``plf_module`` names the pylibfranka module: tests name a stand-in with the same API, and the same
code runs against a simulator of the libfranka network protocol (``shared/HARDWARE_TESTING.md``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import multiprocessing
import time
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from protos import franka
from protos.env_spec import CameraSpec, EnvSpec, ee_delta_action_space
from protos.pose_math import (
    matrix_to_quat,
    pose_from_column_major,
    pose_to_column_major,
    rotvec_to_matrix,
)
from robot_agent.cameras import Camera, CameraConfig, CameraError, make_camera
from robot_agent.drivers.base import (
    DriverCapabilities,
    DriverError,
    DriverObservation,
    RobotDriver,
    StepOutcome,
)
from robot_agent.drivers.franka_process import STATE_SIZE, TARGET_SIZE, SharedBlock, arm_main, gripper_main
from robot_agent.drivers.homing import HomingLimits, HomingPlan, HomingRefused, plan_homing
from robot_agent.drivers.setpoint_filter import MotionLimits, SetpointFilter
from robot_agent.safety import ArmScaling, TcpPose

log = logging.getLogger(__name__)

# The same proprioception layout and home as the sim twin (the Franka contract), so a policy moves
# between them unchanged.
STATE_FIELDS, HOME_JOINTS = franka.STATE_FIELDS, franka.HOME_JOINTS


@dataclass(frozen=True)
class FrankaConfig:
    """One Franka arm. Action deltas are scaled by ``max_translation_m`` / ``max_rotation_rad`` per step."""

    host: str = "172.16.0.2"  # the arm's FCI address
    control_hz: float = 10.0  # policy ticks per second
    instruction: str = ""  # the task's instruction sent to the trainer
    max_episode_steps: int = 200  # the episode's horizon in ticks
    cameras: tuple[CameraConfig, ...] = ()  # cameras on this PC, e.g. [{kind = "realsense", serial = ...}]
    home_joints: tuple[float, ...] = HOME_JOINTS  # the home pose (rad), reached before each episode
    home_duration_s: float = 4.0  # at least; longer when the limits below need it
    home_max_joint_speed_rads: float = 0.5  # homing's joint speed limit
    max_translation_m: float = 0.05  # what a full action moves the TCP target per step
    max_rotation_rad: float = 0.3  # what a full action turns the TCP target per step
    max_target_lead_m: float = franka.TARGET_LEAD_M  # the target never runs further ahead of the TCP
    # The 1 kHz setpoint profile. Franka hardware refused a +x ramp at 2.5 m/s^2 / 500 m/s^3 and ran one
    # at 1.5 m/s^2 / 200 m/s^3 cleanly (franka-sim's calibration notes): these stay well inside that.
    setpoint_gain: float = 6.0  # 1/s: position error -> velocity
    velocity_gain: float = 25.0  # 1/s: velocity error -> acceleration
    max_speed_mps: float = 0.25  # the setpoint profile's speed limit
    max_accel_mps2: float = 1.0  # its acceleration limit
    max_jerk_mps3: float = 100.0  # its jerk limit
    max_angular_speed: float = 0.8  # rad/s
    max_angular_accel: float = 2.0  # rad/s^2
    max_angular_jerk: float = 150.0  # rad/s^3
    cartesian_stiffness: tuple[float, ...] = (
        2000.0,
        2000.0,
        2000.0,
        150.0,
        150.0,
        150.0,
    )  # the impedance controller's stiffness (3 translational N/m, 3 rotational Nm/rad)
    gripper_max_width_m: float = 0.08  # the fingers' opening at +1
    gripper_speed_mps: float = 0.1  # the gripper's speed
    gripper_force_n: float = 20.0  # the grasp force
    gripper_tolerance_m: float = 0.005  # the grasp's width tolerance
    camera_max_age_s: float = 0.2  # a frame older than this holds the robot

    @property
    def motion_limits(self) -> MotionLimits:
        """The 1 kHz setpoint profile's limits, as the arm process's filter takes them."""
        return MotionLimits(**{f.name: getattr(self, f.name) for f in fields(MotionLimits)})

    def __post_init__(self) -> None:
        cameras = tuple(c if isinstance(c, CameraConfig) else CameraConfig(**c) for c in self.cameras)
        object.__setattr__(self, "cameras", cameras)
        if len(self.home_joints) != 7:
            raise ValueError(f"home_joints needs 7 values, got {len(self.home_joints)}")
        if self.home_duration_s <= 0 or self.home_max_joint_speed_rads <= 0:
            raise ValueError("home_duration_s and home_max_joint_speed_rads must be > 0")
        if len(self.cartesian_stiffness) != 6:
            raise ValueError(f"cartesian_stiffness needs 6 values, got {len(self.cartesian_stiffness)}")


class FrankaDriver(RobotDriver):
    """A Franka arm under Cartesian impedance, behind the driver interface.

    ``plf_module`` names the pylibfranka module to import in the helper processes; tests name a
    stand-in with the same API.
    """

    kind = "franka"
    embodiment = franka.PANDA

    def __init__(
        self,
        config: FrankaConfig | None = None,
        plf_module: str = "pylibfranka",
        camera_seams: dict | None = None,
    ) -> None:
        self.config = cfg = config or FrankaConfig()
        self.plf_module = plf_module
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
        self._context = multiprocessing.get_context("spawn")
        self._state = SharedBlock(self._context, STATE_SIZE)
        self._target = SharedBlock(self._context, TARGET_SIZE)
        self._gripper_width = self._context.RawValue("d", cfg.gripper_max_width_m)
        self._processes: list[Any] = []
        self._arm_conn: Any = None
        self._gripper_conn: Any = None
        self._target_position: np.ndarray | None = None
        self._target_rotation: np.ndarray | None = None
        self._fault: str | None = None
        self._holding = False
        self._stopped = False

    # -- helper processes ----------------------------------------------------------------------------
    def connect(self) -> None:
        """Start the arm and gripper processes (they connect to the robot) and the cameras."""
        if self._processes:
            return
        if importlib.util.find_spec(self.plf_module.split(".")[0]) is None:
            raise DriverError(f"the franka driver needs {self.plf_module}: pip install '.[franka]'")
        for name, main, shared in (
            ("arm", arm_main, (self._state, self._target)),
            ("gripper", gripper_main, (self._gripper_width,)),
        ):
            ours, theirs = self._context.Pipe()
            args = (self.plf_module, self.config.host, self.config, *shared, theirs)
            process = self._context.Process(target=main, args=args, name=f"franka-{name}", daemon=True)
            process.start()
            self._processes.append(process)
            deadline = time.monotonic() + 30.0
            while not ours.poll(0.1):
                if not process.is_alive() or time.monotonic() > deadline:
                    self.close()
                    raise DriverError(
                        f"the franka {name} process did not start (exit code {process.exitcode}); "
                        "a script that builds the driver needs an `if __name__ == '__main__':` guard"
                    )
            _, error = ours.recv()
            if error:
                self.close()
                raise DriverError(error)
            if name == "arm":
                self._arm_conn = ours
            else:
                self._gripper_conn = ours
        for camera in self.cameras:
            camera.start()

    def _call(self, *command: Any, timeout: float = 10.0) -> None:
        """Send a command to the arm process and wait for its reply (faults met on the way are kept)."""
        self._arm_conn.send(command)
        deadline = time.monotonic() + timeout
        while self._arm_conn.poll(max(0.0, deadline - time.monotonic())):
            kind, message = self._arm_conn.recv()
            if kind == "fault":
                self._fault = message
                continue
            if message:
                raise DriverError(f"franka {command[0]} failed: {message}")
            return
        raise DriverError(f"franka {command[0]}: no reply within {timeout} s")

    def _drain_faults(self) -> None:
        for conn in (self._arm_conn, self._gripper_conn):
            while conn is not None and conn.poll():
                kind, message = conn.recv()
                if kind == "fault":
                    self._fault = message
                    log.error("franka: %s", message)

    def _read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool, int]:
        values = self._state.read()
        position, rotation = pose_from_column_major(values[14:30])
        return values[:7], values[7:14], position, rotation, bool(values[30]), int(values[31])

    @property
    def rt_overruns(self) -> int:
        """1 kHz cycles the arm process missed (it stepped the setpoint for the time that passed)."""
        return self._read()[5]

    # -- driver interface ------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        """Clear any reflex, home the arm (a smooth joint motion) and open the gripper."""
        del seed  # a real scene cannot be reseeded
        self._ensure_connected()
        self._call("stop")
        self._drain_faults()
        if self._fault is not None:
            self._call("recover")
            self._fault = None
        plan = self._plan_homing()
        self._call("home", list(self.config.home_joints), plan.duration_s, timeout=plan.duration_s + 10)
        self._gripper_conn.send(self.config.gripper_max_width_m)
        self._target_position = None
        self._holding = False

    def _plan_homing(self) -> HomingPlan:
        """The homing motion, checked against the agent's box and timed to its speed limits."""
        cfg, safety = self.config, self.safety_limits
        joints, _, position, rotation, _, _ = self._read()
        start_tcp = np.eye(4)
        start_tcp[:3, :3], start_tcp[:3, 3] = rotation, position
        limits = HomingLimits(
            workspace_low=safety.workspace_low,
            workspace_high=safety.workspace_high,
            max_tcp_speed_mps=min(cfg.max_speed_mps, safety.max_translation_m * cfg.control_hz),
            max_joint_speed_rads=cfg.home_max_joint_speed_rads,
        )
        try:
            plan = plan_homing(
                joints, start_tcp, cfg.home_joints, cfg.home_duration_s, limits, self.embodiment
            )
        except HomingRefused as exc:
            raise DriverError(f"franka: {exc}") from None
        log.info(
            "homing over %.1f s (TCP at most %.2f m/s, joints %.2f rad/s)",
            plan.duration_s, plan.peak_tcp_speed_mps, plan.peak_joint_speed_rads,
        )  # fmt: skip
        return plan

    def observe(self) -> DriverObservation:
        self._ensure_connected()
        self._drain_faults()
        q, dq, position, rotation, _, _ = self._read()
        gripper_width = self._gripper_width.value
        vector = np.concatenate([q, dq, position, matrix_to_quat(rotation), [gripper_width / 2]]).astype(
            np.float32
        )
        images, stamps = {}, {}  # gripper_width is per finger, as in the sim twin
        for camera in self.cameras:
            try:
                frame = camera.read_latest(self.config.camera_max_age_s)
            except CameraError as exc:
                raise DriverError(str(exc)) from None
            images[camera.config.name], stamps[camera.config.name] = frame.image, frame.capture_ns
        return DriverObservation(vector, images, stamps)

    def apply(self, action: np.ndarray) -> StepOutcome:
        self._ensure_connected()
        self._drain_faults()
        if self._fault is not None:
            raise DriverError(f"the Franka stopped: {self._fault}; the next episode reset recovers it")
        _, _, measured, measured_rotation, moving, _ = self._read()
        if not moving:
            self._call("stream")  # from the current pose: the first target is where the arm is
            self._target_position, self._target_rotation = measured, measured_rotation
        cfg = self.config
        position = self._target_position + np.asarray(action[:3], float) * cfg.max_translation_m
        position = measured + np.clip(position - measured, -cfg.max_target_lead_m, cfg.max_target_lead_m)
        rotation = (
            rotvec_to_matrix(np.asarray(action[3:6], float) * cfg.max_rotation_rad) @ self._target_rotation
        )
        self._set_target(position, rotation)
        self._gripper_conn.send((float(action[6]) + 1.0) / 2.0 * cfg.gripper_max_width_m)
        self._holding = False
        return StepOutcome()

    def _set_target(self, position: np.ndarray, rotation: np.ndarray) -> None:
        self._target_position, self._target_rotation = position, rotation
        self._target.write(pose_to_column_major(position, rotation))

    def hold(self) -> None:
        if self._stopped or not self._processes or self._holding:
            return
        if self._read()[4]:  # moving: brake to a stop, not back to where the target had led
            self._call("hold")
            self._target_position, self._target_rotation = pose_from_column_major(self._target.read())
        self._holding = True

    def tcp_targets(self) -> tuple[TcpPose, ...] | None:
        if self._target_position is None:
            return None
        return (TcpPose(self._target_position.copy(), matrix_to_quat(self._target_rotation)),)

    def estop(self) -> None:
        """Stop the motion now; the arm stays stopped until the agent is restarted."""
        self._stopped = True
        if self._arm_conn is not None:
            try:
                self._call("estop", timeout=2.0)
            except DriverError as exc:
                log.error("e-stop: %s", exc)

    def recover(self) -> None:
        """After a reflex (e.g. a collision), clear the error; motion resumes with the next action."""
        self._ensure_connected()
        self._call("stop")
        self._call("recover")
        self._fault = None

    def close(self) -> None:
        for conn, message in (
            (self._arm_conn, ("stop",)),
            (self._arm_conn, ("close",)),
            (self._gripper_conn, "close"),
        ):
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.send(message)
        for process in self._processes:
            process.join(3.0)
            if process.is_alive():
                process.kill()
        self._processes, self._arm_conn, self._gripper_conn = [], None, None
        for camera in self.cameras:
            camera.stop()

    def _ensure_connected(self) -> None:
        if self._stopped:
            raise DriverError("the arm is e-stopped; restart the agent")
        if not self._processes:
            self.connect()


__all__ = ["FrankaConfig", "FrankaDriver", "SetpointFilter"]
