"""What every real single arm under Cartesian control shares, whatever its vendor library: a TCP
target that each tick's action moves (kept within ``max_target_lead_m`` of the measured TCP), a
helper process that follows it at the arm's real-time rate, a gripper, cameras, and faults.

A subclass (``franka.py``, ``ur5e.py``) starts its helper processes, reads its shared state block
(:meth:`_measured`), writes the target in its library's pose format, and homes the arm.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from protos.pose_math import matrix_to_quat, rotvec_to_matrix
from robot_agent.cameras import Camera, CameraError, make_camera
from robot_agent.drivers.base import DriverError, DriverObservation, RobotDriver, StepOutcome
from robot_agent.drivers.helpers import HelperProcesses, SharedBlock
from robot_agent.safety import ArmScaling, TcpPose

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArmReading:
    """One read of the helper's shared state."""

    joints: np.ndarray
    joint_velocities: np.ndarray
    position: np.ndarray  # the TCP, base frame (m)
    rotation: np.ndarray  # 3x3
    streaming: bool  # the helper is following the target


class CartesianArmDriver(RobotDriver):
    """The shared half of a real arm's driver. ``title`` names it in errors ("the Franka stopped")
    and ``stream_helper`` is the helper process that follows the target."""

    title = ""
    stream_helper = ""

    def _setup(self, config: Any, camera_seams: dict | None, state_size: int, target_size: int) -> None:
        self.config = config
        self.arms = (ArmScaling(config.max_translation_m, config.max_rotation_rad),)
        self.cameras: list[Camera] = [
            make_camera(c, **(camera_seams or {}).get(c.name, {})) for c in config.cameras
        ]
        self._helpers = HelperProcesses(self.kind)
        self._state = SharedBlock(self._helpers.context, state_size)
        self._target = SharedBlock(self._helpers.context, target_size)
        self._gripper_width = self._helpers.context.RawValue("d", config.gripper_max_width_m)
        self._target_position: np.ndarray | None = None
        self._target_rotation: np.ndarray | None = None
        self._holding = False
        self._stopped = False

    # -- what a subclass provides -----------------------------------------------------------------
    def connect(self) -> None:
        raise NotImplementedError

    def _measured(self) -> ArmReading:
        raise NotImplementedError

    def _write_target(self, position: np.ndarray, rotation: np.ndarray) -> None:
        raise NotImplementedError

    def _read_target(self) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _goodbyes(self) -> dict[str, list[Any]]:
        """What each helper is sent before it is joined."""
        return {name: [("close",)] for name in self._helpers.conns}

    # -- shared -----------------------------------------------------------------------------------
    def _call(self, *command: Any, timeout: float = 10.0) -> None:
        self._helpers.call(self.stream_helper, *command, timeout=timeout)

    def _send_gripper(self, width_m: float) -> None:
        if self._helpers.has("gripper"):
            self._helpers.send("gripper", width_m)

    def observe(self) -> DriverObservation:
        self._ensure_connected()
        self._helpers.drain_faults(log)
        arm = self._measured()
        width = self._gripper_width.value / 2  # per finger, as in the sim twin
        vector = np.concatenate(
            [arm.joints, arm.joint_velocities, arm.position, matrix_to_quat(arm.rotation), [width]]
        ).astype(np.float32)
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
        self._helpers.drain_faults(log)
        if self._helpers.fault is not None:
            raise DriverError(
                f"the {self.title} stopped: {self._helpers.fault}; the next episode reset recovers it"
            )
        arm = self._measured()
        if not arm.streaming or self._target_position is None:
            self._call("stream")  # from the current pose: the first target is where the arm is
            self._target_position, self._target_rotation = arm.position, arm.rotation
        cfg = self.config
        position = self._target_position + np.asarray(action[:3], float) * cfg.max_translation_m
        position = arm.position + np.clip(
            position - arm.position, -cfg.max_target_lead_m, cfg.max_target_lead_m
        )
        rotation = (
            rotvec_to_matrix(np.asarray(action[3:6], float) * cfg.max_rotation_rad) @ self._target_rotation
        )
        self._target_position, self._target_rotation = position, rotation
        self._write_target(position, rotation)
        self._send_gripper((float(action[6]) + 1.0) / 2.0 * cfg.gripper_max_width_m)
        self._holding = False
        return StepOutcome()

    def hold(self) -> None:
        if self._stopped or not self._helpers.running or self._holding:
            return
        if self._measured().streaming:  # brake to a stop, not back to where the target had led
            self._call("hold")
            self._target_position, self._target_rotation = self._read_target()
        self._holding = True

    def tcp_targets(self) -> tuple[TcpPose, ...] | None:
        if self._target_position is None:
            return None
        return (TcpPose(np.array(self._target_position), matrix_to_quat(self._target_rotation)),)

    def estop(self) -> None:
        """Stop the motion now; the arm stays stopped until the agent is restarted."""
        self._stopped = True
        if self._helpers.has(self.stream_helper):
            try:
                self._call("estop", timeout=2.0)
            except DriverError as exc:
                log.error("e-stop: %s", exc)

    def close(self) -> None:
        self._helpers.close(self._goodbyes())
        for camera in self.cameras:
            camera.stop()

    def _ensure_connected(self) -> None:
        if self._stopped:
            raise DriverError("the arm is e-stopped; restart the agent")
        if not self._helpers.running:
            self.connect()
