"""The 1 kHz Cartesian setpoint profile the Franka's arm process runs: bounded speed, acceleration, jerk."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from protos.pose_math import matrix_to_rotvec, rotvec_to_matrix

if TYPE_CHECKING:
    from robot_agent.drivers.franka import FrankaConfig


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

    def stopping_point(self) -> np.ndarray:
        """Where the setpoint comes to rest if braked at full deceleration from its current velocity."""
        speed = float(np.linalg.norm(self.velocity))
        return self.position + self.velocity * speed / (2.0 * self.config.max_accel_mps2)

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


__all__ = ["SetpointFilter"]
