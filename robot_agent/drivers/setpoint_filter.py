"""The 1 kHz Cartesian setpoint profile an arm's real-time process runs (the Franka's today): bounded
speed, acceleration and jerk. It knows no arm: its limits are a :class:`MotionLimits`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from protos.pose_math import matrix_to_rotvec, rotvec_to_matrix


@dataclass(frozen=True)
class MotionLimits:
    """The setpoint profile's gains and limits (SI units; angles in radians)."""

    setpoint_gain: float  # 1/s: position error -> velocity
    velocity_gain: float  # 1/s: velocity error -> acceleration
    max_speed_mps: float
    max_accel_mps2: float
    max_jerk_mps3: float
    max_angular_speed: float
    max_angular_accel: float
    max_angular_jerk: float

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value <= 0:
                raise ValueError(f"setpoint {name} must be > 0, got {value}")


class SetpointFilter:
    """Moves a Cartesian setpoint toward a target with bounded speed, acceleration and jerk (1 kHz).

    A cascade: position error -> desired velocity -> desired acceleration, each clipped, and the
    acceleration itself changes by at most ``jerk * dt`` per cycle. libfranka checks the joint-space
    jerk its inverse kinematics makes of the Cartesian commands; a profile without a jerk limit is
    refused (``cartesian_motion_generator_joint_acceleration_discontinuity``).
    """

    def __init__(self, config: MotionLimits, position: np.ndarray, rotation: np.ndarray) -> None:
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

    def stopping_point(self, dt: float = 0.001) -> np.ndarray:
        """Where the setpoint comes to rest if braked now within the speed, acceleration and jerk limits.

        The brake is this filter's own cascade asked for zero velocity, stepped along the direction
        of motion. ``v^2 / 2a`` alone ignores the time the jerk limit takes to turn the acceleration
        round, and a target there made the profile overshoot it by ~3 mm and come back.
        """
        speed = float(np.linalg.norm(self.velocity))
        if speed == 0.0:
            return self.position.copy()
        direction = self.velocity / speed
        cfg = self.config
        accel = float(self.acceleration @ direction)
        distance = 0.0
        for _ in range(int(10.0 / dt)):  # the brake takes well under a second from full speed
            desired = max(-cfg.max_accel_mps2, -cfg.velocity_gain * speed)
            accel += min(max(desired - accel, -cfg.max_jerk_mps3 * dt), cfg.max_jerk_mps3 * dt)
            speed += accel * dt
            if speed <= 1e-4:  # the cascade's tail decays (what is left is under 5 µm)
                break
            distance += speed * dt
        return self.position + direction * distance

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


__all__ = ["MotionLimits", "SetpointFilter"]
