"""Local safety: every action passes through here on the robot PC before it reaches a driver.

The trainer is never trusted. A chunk with a wrong shape, NaN or out-of-range value is rejected as a
whole; a valid action is limited per step (translation, rotation, gripper rate) and its target is
kept inside the workspace box. The watchdog and the stale-action rules live in ``action_queue.py``
and ``watchdog.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from protos.env_spec import EE_DELTA_POSE_GRIPPER, EnvSpec
from protos.validation import ContractError, validate_action


@dataclass(frozen=True)
class SafetyConfig:
    """Limits enforced on the agent. Lengths in metres, angles in radians, per control step."""

    workspace_low: tuple[float, float, float] = (0.2, -0.45, 0.02)
    workspace_high: tuple[float, float, float] = (0.85, 0.45, 0.6)
    max_translation_m: float = 0.03
    max_rotation_rad: float = 0.2
    max_gripper_change: float = 1.0  # normalised gripper units per step (the full range is 2)
    watchdog_periods: float = 2.0  # hold when no valid action arrived within this many control periods
    max_action_age_ms: float = 500.0  # reject chunks answering an observation older than this

    def __post_init__(self) -> None:
        low, high = np.asarray(self.workspace_low), np.asarray(self.workspace_high)
        if low.shape != (3,) or high.shape != (3,) or not (low < high).all():
            raise ValueError(f"safety workspace must be 3 lows below 3 highs, got {low} / {high}")
        for name in ("max_translation_m", "max_rotation_rad", "max_gripper_change", "watchdog_periods"):
            if getattr(self, name) <= 0:
                raise ValueError(f"safety.{name} must be > 0, got {getattr(self, name)}")
        if self.max_action_age_ms <= 0:
            raise ValueError(f"safety.max_action_age_ms must be > 0, got {self.max_action_age_ms}")


@dataclass(frozen=True)
class ArmScaling:
    """How one arm's normalised ee-delta action maps to metres / radians, and where it sits.

    ``prefix`` selects the arm's action dims and state fields: ``""`` for a single arm
    (``dx`` ... ``gripper``, ``tcp_pos``), ``"left_"`` / ``"right_"`` for a dual-arm robot.
    """

    max_translation_m: float
    max_rotation_rad: float
    prefix: str = ""


class SafetyFilter:
    """Rejects malformed chunks and limits each action to what the robot may do in one step."""

    def __init__(self, spec: EnvSpec, arms: tuple[ArmScaling, ...], config: SafetyConfig) -> None:
        if spec.action.kind != EE_DELTA_POSE_GRIPPER:
            raise ValueError(
                f"the agent's safety filter supports {EE_DELTA_POSE_GRIPPER!r} actions, "
                f"got {spec.action.kind!r}; configure the driver for end-effector control"
            )
        self.spec, self.config = spec, config
        names = list(spec.action.names)
        slices = spec.state_slices()
        self._arms = []
        for arm in arms:
            p = arm.prefix
            try:
                translation = [names.index(p + n) for n in ("dx", "dy", "dz")]
                gripper = names.index(p + "gripper")
                tcp = slices[p + "tcp_pos"]
            except (ValueError, KeyError) as exc:
                raise ValueError(
                    f"spec {spec.name!r} lacks arm dims/fields for prefix {p!r}: {exc}"
                ) from None
            rotation = [names.index(p + n) for n in ("droll", "dpitch", "dyaw") if p + n in names]
            self._arms.append((arm, translation, rotation, gripper, tcp))
        self._low = np.asarray(config.workspace_low)
        self._high = np.asarray(config.workspace_high)

    def check_chunk(self, chunk: np.ndarray) -> np.ndarray:
        """Return ``float32[n, dim]`` or raise :class:`ContractError` (shape, NaN/inf, range)."""
        chunk = validate_action(self.spec, chunk, allow_chunk=True)
        return chunk[None] if chunk.ndim == 1 else chunk

    def limit(
        self,
        action: np.ndarray,
        state: np.ndarray,
        last_action: np.ndarray | None,
        targets: tuple[np.ndarray, ...] | None = None,
    ) -> tuple[np.ndarray, list[str]]:
        """Limit one valid action; returns the safe action and what was clipped.

        Deltas move each arm's commanded TCP target (``targets``, one per arm, from the driver) when
        known, else the measured TCP from ``state``. The box bounds the resulting target.
        """
        safe = np.array(action, dtype=np.float64)
        events: list[str] = []
        for i, (arm, translation, rotation, gripper, tcp_slice) in enumerate(self._arms):
            reference = targets[i] if targets is not None else state[tcp_slice]
            tcp = np.asarray(reference, dtype=np.float64)
            delta = safe[translation] * arm.max_translation_m
            norm = float(np.linalg.norm(delta))
            if norm > self.config.max_translation_m:
                delta *= self.config.max_translation_m / norm
                events.append(f"clipped:{arm.prefix}translation")
            target = np.clip(tcp + delta, self._low, self._high)
            if not np.allclose(target, tcp + delta):
                events.append(f"clipped:{arm.prefix}workspace")
                delta = target - tcp
                # A TCP already outside the box is brought back at most one step's length at a time.
                norm = float(np.linalg.norm(delta))
                if norm > self.config.max_translation_m:
                    delta *= self.config.max_translation_m / norm
            safe[translation] = delta / arm.max_translation_m
            if rotation:
                rotvec = safe[rotation] * arm.max_rotation_rad
                angle = float(np.linalg.norm(rotvec))
                if angle > self.config.max_rotation_rad:
                    safe[rotation] *= self.config.max_rotation_rad / angle
                    events.append(f"clipped:{arm.prefix}rotation")
            if last_action is not None:
                previous = float(last_action[gripper])
                step = self.config.max_gripper_change
                clipped = float(np.clip(safe[gripper], previous - step, previous + step))
                if clipped != safe[gripper]:
                    safe[gripper] = clipped
                    events.append(f"clipped:{arm.prefix}gripper_rate")
        low, high = self.spec.action.low_array(), self.spec.action.high_array()
        return np.clip(safe, low, high).astype(np.float32), events


__all__ = ["ArmScaling", "ContractError", "SafetyConfig", "SafetyFilter"]
