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

import importlib.util
import logging
from dataclasses import dataclass, fields

import numpy as np

from protos.env_spec import CameraSpec, EnvSpec, ee_delta_action_space
from protos.pose_math import matrix_to_rotvec, rotvec_to_matrix
from protos.ur5e import UR5E
from robot_agent.cameras import CameraConfig
from robot_agent.drivers.base import (
    DriverCapabilities,
    DriverError,
)
from robot_agent.drivers.cartesian_arm import ArmReading, CartesianArmDriver
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


class UR5eDriver(CartesianArmDriver):
    """A UR5e under ``servoL``, behind the driver interface. ``rtde_modules`` / ``gripper_module``
    name the modules the helper processes import; tests name stand-ins with the same API."""

    kind = "ur5e"
    embodiment = UR5E
    title, stream_helper = "UR5e", "servo"

    def __init__(
        self,
        config: UR5eConfig | None = None,
        rtde_modules: ServoModules | None = None,
        gripper_module: str = "robotiq_gripper",
        camera_seams: dict | None = None,
    ) -> None:
        cfg = config or UR5eConfig()
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
        self._setup(cfg, camera_seams, STATE_SIZE, TARGET_SIZE)

    # -- helper processes ------------------------------------------------------------------------
    def connect(self) -> None:
        """Start the servo (and gripper) processes, which connect to the controller, and the cameras."""
        if self._helpers.running:
            return
        if importlib.util.find_spec(self.modules.control.split(".")[0]) is None:
            raise DriverError(f"the ur5e driver needs {self.modules.control} (ur_rtde): pip install '.[ur]'")
        cfg = self.config
        self._helpers.start("servo", servo_main, (self.modules, cfg.host, cfg.motion_limits, cfg.servo_settings,
                                                  self._state, self._target))  # fmt: skip
        if self.gripper_module:
            self._helpers.start(
                "gripper", gripper_main, (self.gripper_module, cfg.host, cfg, self._gripper_width)
            )
        for camera in self.cameras:
            camera.start()

    def _read(self) -> tuple[ArmReading, bool, bool]:
        """The arm, and whether it is in a protective stop / an emergency stop."""
        v = self._state.read()
        arm = ArmReading(v[:6], v[6:12], v[12:15], rotvec_to_matrix(v[15:18]), bool(v[18]))
        return arm, bool(v[19]), bool(v[20])

    def _measured(self) -> ArmReading:
        return self._read()[0]

    def _write_target(self, position: np.ndarray, rotation: np.ndarray) -> None:
        self._target.write([*position, *matrix_to_rotvec(rotation)])

    def _read_target(self) -> tuple[np.ndarray, np.ndarray]:
        target = self._target.read()
        return target[:3], rotvec_to_matrix(target[3:])

    # -- driver interface ------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        """Unlock a protective stop, home the arm (moveJ, checked against the box) and open the gripper."""
        del seed  # a real scene cannot be reseeded
        self._ensure_connected()
        self._helpers.drain_faults(log)
        arm, protective, emergency = self._read()
        if emergency:
            raise DriverError(
                "the UR5e is e-stopped: release the e-stop on the pendant, then start an episode"
            )
        if protective or self._helpers.fault is not None:
            self._call("recover", timeout=20.0)
            self._helpers.fault = None
            arm = self._measured()
        start_tcp = np.eye(4)
        start_tcp[:3, :3], start_tcp[:3, 3] = arm.rotation, arm.position
        cfg, safety = self.config, self.safety_limits
        limits = HomingLimits(safety.workspace_low, safety.workspace_high,
                              max_tcp_speed_mps=min(cfg.max_speed_mps, safety.max_translation_m * cfg.control_hz),
                              max_joint_speed_rads=cfg.home_max_joint_speed_rads)  # fmt: skip
        try:
            plan = plan_homing(arm.joints, start_tcp, cfg.home_joints, 0.5, limits, self.embodiment)
        except HomingRefused as exc:
            raise DriverError(f"ur5e: {exc}") from None
        # moveJ's speed is the fastest joint's: the plan's, so neither the TCP nor a joint passes its limit.
        speed = max(1e-3, min(cfg.home_max_joint_speed_rads, plan.peak_joint_speed_rads))
        self._call("home", list(cfg.home_joints), speed, timeout=plan.duration_s + 30.0)
        self._send_gripper(cfg.gripper_max_width_m)
        self._target_position = None
        self._holding = False


__all__ = ["UR5eConfig", "UR5eDriver"]
