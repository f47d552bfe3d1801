"""A Universal Robots UR5e through ur_rtde (``pip install '.[ur]'``), behind the driver interface.

Each policy tick moves a TCP target (the action's deltas, kept within ``max_target_lead_m`` of the
measured TCP); the servo process (:mod:`robot_agent.drivers.ur5e_process`) follows it at 500 Hz with
``servoL`` through a jerk-limited setpoint. A protective or emergency stop reported by the
controller stops the stream and raises on the next ``apply`` (the agent holds and reports it);
``reset`` unlocks a protective stop, then homes the arm with ``moveJ`` along a path checked against
the agent's box with the UR5e's kinematics (:mod:`robot_agent.drivers.homing`). An e-stop needs a
person at the pendant. The gripper is a Robotiq on the tool port, through the ``robotiq_gripper``
client that ur_rtde ships with its examples (``gripper_module=""``: no gripper).
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

from protos.env_spec import CameraSpec, EnvSpec, ee_delta_action_space
from protos.pose_math import matrix_to_quat, matrix_to_rotvec, rotvec_to_matrix
from protos.ur5e import UR5E
from robot_agent.cameras import Camera, CameraConfig, CameraError, make_camera
from robot_agent.drivers.base import (
    DriverCapabilities,
    DriverError,
    DriverObservation,
    RobotDriver,
    StepOutcome,
)
from robot_agent.drivers.franka_process import SharedBlock
from robot_agent.drivers.homing import HomingLimits, HomingRefused, plan_homing
from robot_agent.drivers.setpoint_filter import MotionLimits
from robot_agent.drivers.ur5e_process import (
    STATE_SIZE,
    TARGET_SIZE,
    ServoModules,
    ServoSettings,
    gripper_main,
    servo_main,
)
from robot_agent.safety import ArmScaling, TcpPose

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UR5eConfig:
    """A UR5e on ``host`` (its controller's address), with its cameras and limits."""

    host: str = "192.168.1.102"  # the UR controller (RTDE, dashboard and the Robotiq URCap)
    control_hz: float = 10.0  # policy ticks per second
    instruction: str = ""  # the task's instruction sent to the trainer
    max_episode_steps: int = 200  # the episode's horizon in ticks
    cameras: tuple[CameraConfig, ...] = ()  # cameras on this PC, e.g. [{kind = "realsense", serial = ...}]
    home_joints: tuple[float, ...] = UR5E.home_joints  # the home pose (rad), reached before each episode
    home_max_joint_speed_rads: float = 0.5  # moveJ's joint speed when homing
    home_joint_accel_rads2: float = 0.5  # moveJ's joint acceleration
    max_translation_m: float = 0.05  # what a full action moves the TCP target per step
    max_rotation_rad: float = 0.3  # what a full action turns the TCP target per step
    max_target_lead_m: float = UR5E.target_lead_m  # the target never runs further ahead of the TCP
    servo_hz: float = 500.0  # the servo loop (the e-series' RTDE rate)
    lookahead_time_s: float = 0.1  # servoL's smoothing (0.03-0.2 s)
    servo_gain: float = 300.0  # servoL's proportional gain (100-2000)
    setpoint_gain: float = 6.0  # 1/s: position error -> velocity
    velocity_gain: float = 25.0  # 1/s: velocity error -> acceleration
    max_speed_mps: float = 0.25  # the setpoint profile's speed limit
    max_accel_mps2: float = 1.0  # its acceleration limit
    max_jerk_mps3: float = 100.0  # its jerk limit
    max_angular_speed: float = 0.8  # rad/s
    max_angular_accel: float = 2.0  # rad/s^2
    max_angular_jerk: float = 150.0  # rad/s^3
    gripper_max_width_m: float = UR5E.gripper.max_width_m  # the fingers' opening at +1
    gripper_speed: int = 128  # the Robotiq's speed (0-255)
    gripper_force: int = 64  # the Robotiq's force (0-255)
    camera_max_age_s: float = 0.2  # a frame older than this holds the robot

    def __post_init__(self) -> None:
        cameras = tuple(c if isinstance(c, CameraConfig) else CameraConfig(**c) for c in self.cameras)
        object.__setattr__(self, "cameras", cameras)
        if len(self.home_joints) != UR5E.num_joints or not UR5E.within_joint_limits(self.home_joints):
            raise ValueError(
                f"home_joints needs {UR5E.num_joints} values within the UR5e's joint limits, got {self.home_joints}"
            )
        if not 0 <= self.gripper_speed <= 255 or not 0 <= self.gripper_force <= 255:
            raise ValueError("gripper_speed and gripper_force are Robotiq units, 0-255")
        if (
            self.servo_hz <= 0
            or not 0.03 <= self.lookahead_time_s <= 0.2
            or not 100 <= self.servo_gain <= 2000
        ):
            raise ValueError(
                "servo_hz must be > 0, lookahead_time_s in [0.03, 0.2] and servo_gain in [100, 2000] (ur_rtde's ranges)"
            )

    @property
    def motion_limits(self) -> MotionLimits:
        return MotionLimits(**{f.name: getattr(self, f.name) for f in fields(MotionLimits)})

    @property
    def servo_settings(self) -> ServoSettings:
        return ServoSettings(self.servo_hz, self.lookahead_time_s, self.servo_gain,
                             self.home_max_joint_speed_rads, self.home_joint_accel_rads2)  # fmt: skip


class UR5eDriver(RobotDriver):
    """A UR5e under ``servoL``, behind the driver interface. ``rtde_modules`` / ``gripper_module``
    name the modules the helper processes import; tests name stand-ins with the same API."""

    kind = "ur5e"
    embodiment = UR5E

    def __init__(
        self,
        config: UR5eConfig | None = None,
        rtde_modules: ServoModules | None = None,
        gripper_module: str = "robotiq_gripper",
        camera_seams: dict | None = None,
    ) -> None:
        self.config = cfg = config or UR5eConfig()
        self.modules, self.gripper_module = rtde_modules or ServoModules(), gripper_module
        self.spec = EnvSpec(
            name="ur5e/real",
            cameras=tuple(CameraSpec(c.name, c.height, c.width, c.fps) for c in cfg.cameras),
            state_fields=UR5E.state_fields,
            action=ee_delta_action_space(rotation=True),
            control_hz=cfg.control_hz,
            instruction=cfg.instruction,
            max_episode_steps=cfg.max_episode_steps,
            metadata={"robot": "ur5e", "host": cfg.host},
        )
        self.capabilities = DriverCapabilities(reset=False, reward=False, gripper=bool(gripper_module))
        self.arms = (ArmScaling(cfg.max_translation_m, cfg.max_rotation_rad),)
        self.cameras: list[Camera] = [
            make_camera(c, **(camera_seams or {}).get(c.name, {})) for c in cfg.cameras
        ]
        self._context = multiprocessing.get_context("spawn")
        self._state = SharedBlock(self._context, STATE_SIZE)
        self._target = SharedBlock(self._context, TARGET_SIZE)
        self._gripper_width = self._context.RawValue("d", cfg.gripper_max_width_m)
        self._processes: list[Any] = []
        self._servo_conn: Any = None
        self._gripper_conn: Any = None
        self._target_position: np.ndarray | None = None
        self._target_rotation: np.ndarray | None = None
        self._fault: str | None = None
        self._holding = False
        self._stopped = False

    # -- helper processes ------------------------------------------------------------------------
    def connect(self) -> None:
        """Start the servo (and gripper) processes, which connect to the controller, and the cameras."""
        if self._processes:
            return
        if importlib.util.find_spec(self.modules.control.split(".")[0]) is None:
            raise DriverError(f"the ur5e driver needs {self.modules.control} (ur_rtde): pip install '.[ur]'")
        helpers = [("servo", servo_main, (self.modules, self.config.host, self.config.motion_limits,
                                          self.config.servo_settings, self._state, self._target))]  # fmt: skip
        if self.gripper_module:
            helpers.append(
                (
                    "gripper",
                    gripper_main,
                    (self.gripper_module, self.config.host, self.config, self._gripper_width),
                )
            )
        for name, main, args in helpers:
            ours, theirs = self._context.Pipe()
            process = self._context.Process(
                target=main, args=(*args, theirs), name=f"ur5e-{name}", daemon=True
            )
            process.start()
            self._processes.append(process)
            deadline = time.monotonic() + 30.0
            while not ours.poll(0.1):
                if not process.is_alive() or time.monotonic() > deadline:
                    self.close()
                    raise DriverError(
                        f"the ur5e {name} process did not start (exit code {process.exitcode}); "
                        "a script that builds the driver needs an `if __name__ == '__main__':` guard"
                    )
            _, error = ours.recv()
            if error:
                self.close()
                raise DriverError(error)
            if name == "servo":
                self._servo_conn = ours
            else:
                self._gripper_conn = ours
        for camera in self.cameras:
            camera.start()

    def _call(self, *command: Any, timeout: float = 10.0) -> None:
        """Send a command to the servo process and wait for its reply (faults met on the way are kept)."""
        self._servo_conn.send(command)
        deadline = time.monotonic() + timeout
        while self._servo_conn.poll(max(0.0, deadline - time.monotonic())):
            kind, message = self._servo_conn.recv()
            if kind == "fault":
                self._fault = message
                continue
            if message:
                raise DriverError(f"ur5e {command[0]} failed: {message}")
            return
        raise DriverError(f"ur5e {command[0]}: no reply within {timeout} s")

    def _drain_faults(self) -> None:
        for conn in (self._servo_conn, self._gripper_conn):
            while conn is not None and conn.poll():
                kind, message = conn.recv()
                if kind == "fault":
                    self._fault = message
                    log.error("ur5e: %s", message)

    def _read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool, bool, bool]:
        v = self._state.read()
        position, rotation = v[12:15], rotvec_to_matrix(v[15:18])
        return v[:6], v[6:12], position, rotation, bool(v[18]), bool(v[19]), bool(v[20])

    # -- driver interface ------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        """Unlock a protective stop, home the arm (moveJ, checked against the box) and open the gripper."""
        self._ensure_connected()
        self._drain_faults()
        _, _, _, _, _, protective, emergency = self._read()
        if emergency:
            raise DriverError(
                "the UR5e is e-stopped: release the e-stop on the pendant, then start an episode"
            )
        if protective or self._fault is not None:
            self._call("recover", timeout=20.0)
            self._fault = None
        joints, _, position, rotation, _, _, _ = self._read()
        start_tcp = np.eye(4)
        start_tcp[:3, :3], start_tcp[:3, 3] = rotation, position
        cfg, safety = self.config, self.safety_limits
        limits = HomingLimits(safety.workspace_low, safety.workspace_high,
                              max_tcp_speed_mps=min(cfg.max_speed_mps, safety.max_translation_m * cfg.control_hz),
                              max_joint_speed_rads=cfg.home_max_joint_speed_rads)  # fmt: skip
        try:
            plan = plan_homing(joints, start_tcp, cfg.home_joints, 0.5, limits, self.embodiment)
        except HomingRefused as exc:
            raise DriverError(f"ur5e: {exc}") from None
        # moveJ's speed is the fastest joint's: the plan's, so neither the TCP nor a joint passes its limit.
        speed = max(1e-3, min(cfg.home_max_joint_speed_rads, plan.peak_joint_speed_rads))
        self._call("home", list(cfg.home_joints), speed, timeout=plan.duration_s + 30.0)
        if self._gripper_conn is not None:
            self._gripper_conn.send(cfg.gripper_max_width_m)
        self._target_position = None
        self._holding = False

    def observe(self) -> DriverObservation:
        self._ensure_connected()
        self._drain_faults()
        q, dq, position, rotation, _, _, _ = self._read()
        width = self._gripper_width.value / 2  # per finger, as in the sim
        vector = np.concatenate([q, dq, position, matrix_to_quat(rotation), [width]]).astype(np.float32)
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
        self._drain_faults()
        if self._fault is not None:
            raise DriverError(f"the UR5e stopped: {self._fault}; the next episode reset recovers it")
        _, _, measured, measured_rotation, streaming, _, _ = self._read()
        if not streaming or self._target_position is None:
            self._call("stream")  # from the current pose: the first target is where the arm is
            self._target_position, self._target_rotation = measured, measured_rotation
        cfg = self.config
        position = self._target_position + np.asarray(action[:3], float) * cfg.max_translation_m
        position = measured + np.clip(position - measured, -cfg.max_target_lead_m, cfg.max_target_lead_m)
        rotation = (
            rotvec_to_matrix(np.asarray(action[3:6], float) * cfg.max_rotation_rad) @ self._target_rotation
        )
        self._target_position, self._target_rotation = position, rotation
        self._target.write([*position, *matrix_to_rotvec(rotation)])
        if self._gripper_conn is not None:
            self._gripper_conn.send((float(action[6]) + 1.0) / 2.0 * cfg.gripper_max_width_m)
        self._holding = False
        return StepOutcome()

    def hold(self) -> None:
        if self._stopped or not self._processes or self._holding:
            return
        if self._read()[4]:  # streaming: brake to a stop, not back to where the target had led
            self._call("hold")
            target = self._target.read()
            self._target_position, self._target_rotation = target[:3], rotvec_to_matrix(target[3:])
        self._holding = True

    def tcp_targets(self) -> tuple[TcpPose, ...] | None:
        if self._target_position is None:
            return None
        return (TcpPose(np.asarray(self._target_position).copy(), matrix_to_quat(self._target_rotation)),)

    def estop(self) -> None:
        """Stop now (a protective stop the controller latches); stays stopped until the agent restarts."""
        self._stopped = True
        if self._servo_conn is not None:
            try:
                self._call("estop", timeout=2.0)
            except DriverError as exc:
                log.error("e-stop: %s", exc)

    def close(self) -> None:
        for conn, message in ((self._servo_conn, ("close",)), (self._gripper_conn, "close")):
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.send(message)
        for process in self._processes:
            process.join(3.0)
            if process.is_alive():
                process.kill()
        self._processes, self._servo_conn, self._gripper_conn = [], None, None
        for camera in self.cameras:
            camera.stop()

    def _ensure_connected(self) -> None:
        if self._stopped:
            raise DriverError("the arm is e-stopped; restart the agent")
        if not self._processes:
            self.connect()


__all__ = ["UR5eConfig", "UR5eDriver"]
