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

import importlib.util
import logging
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from protos import franka
from protos.env_spec import CameraSpec, EnvSpec, ee_delta_action_space
from protos.pose_math import (
    pose_from_column_major,
    pose_to_column_major,
)
from robot_agent.cameras import CameraConfig
from robot_agent.drivers.base import (
    DriverCapabilities,
    DriverError,
)
from robot_agent.drivers.cartesian_arm import ArmReading, CartesianArmDriver
from robot_agent.drivers.franka_process import STATE_SIZE, TARGET_SIZE, arm_main, gripper_main
from robot_agent.drivers.homing import HomingLimits, HomingPlan, HomingRefused, plan_homing
from robot_agent.drivers.setpoint_filter import MotionLimits, SetpointFilter

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


class FrankaDriver(CartesianArmDriver):
    """A Franka arm under Cartesian impedance, behind the driver interface.

    ``plf_module`` names the pylibfranka module to import in the helper processes; tests name a
    stand-in with the same API.
    """

    kind = "franka"
    embodiment = franka.PANDA
    title, stream_helper = "Franka", "arm"

    def __init__(
        self,
        config: FrankaConfig | None = None,
        plf_module: str = "pylibfranka",
        camera_seams: dict | None = None,
    ) -> None:
        cfg = config or FrankaConfig()
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
        self._setup(cfg, camera_seams, STATE_SIZE, TARGET_SIZE)

    # -- helper processes ----------------------------------------------------------------------------
    def connect(self) -> None:
        """Start the arm and gripper processes (they connect to the robot) and the cameras."""
        if self._helpers.running:
            return
        if importlib.util.find_spec(self.plf_module.split(".")[0]) is None:
            raise DriverError(f"the franka driver needs {self.plf_module}: pip install '.[franka]'")
        host = self.config.host
        self._helpers.start("arm", arm_main, (self.plf_module, host, self.config, self._state, self._target))
        self._helpers.start(
            "gripper", gripper_main, (self.plf_module, host, self.config, self._gripper_width)
        )
        for camera in self.cameras:
            camera.start()

    def _read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool, int]:
        values = self._state.read()
        position, rotation = pose_from_column_major(values[14:30])
        return values[:7], values[7:14], position, rotation, bool(values[30]), int(values[31])

    def _measured(self) -> ArmReading:
        q, dq, position, rotation, moving, _ = self._read()
        return ArmReading(q, dq, position, rotation, moving)

    def _write_target(self, position: np.ndarray, rotation: np.ndarray) -> None:
        self._target.write(pose_to_column_major(position, rotation))

    def _read_target(self) -> tuple[np.ndarray, np.ndarray]:
        return pose_from_column_major(self._target.read())

    def _goodbyes(self) -> dict[str, list[Any]]:
        return {"arm": [("stop",), ("close",)], "gripper": ["close"]}

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
        self._helpers.drain_faults(log)
        if self._helpers.fault is not None:
            self._call("recover")
            self._helpers.fault = None
        plan = self._plan_homing()
        self._call("home", list(self.config.home_joints), plan.duration_s, timeout=plan.duration_s + 10)
        self._send_gripper(self.config.gripper_max_width_m)
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

    def recover(self) -> None:
        """After a reflex (e.g. a collision), clear the error; motion resumes with the next action."""
        self._ensure_connected()
        self._call("stop")
        self._call("recover")
        self._helpers.fault = None


__all__ = ["FrankaConfig", "FrankaDriver", "SetpointFilter"]
