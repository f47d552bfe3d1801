"""Local safety: every action passes through here on the robot PC before it reaches a driver.

The trainer is never trusted. A chunk with a wrong shape, NaN or out-of-range value is rejected as a
whole; a valid action is limited per step (translation, rotation, gripper rate). Its target is kept
inside the workspace box, within a short lead of the *measured* TCP (so the arm never builds up
momentum toward a wall or jumps when it comes free), and its orientation within a bound of both the
measured orientation and the episode's first one. The watchdog and the stale-action rules live in
``action_queue.py`` and ``watchdog.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from protos.embodiment import Embodiment
from protos.env_spec import EE_DELTA_POSE_GRIPPER, EnvSpec
from protos.pose_math import cap_norm, guarded_rotation_step, quat_to_matrix, shorten_into_ball
from protos.validation import ContractError, validate_action


@dataclass(frozen=True)
class SafetyConfig:
    """Limits enforced on the agent. Lengths in metres, angles in radians, per control step."""

    # The TCP box (m, base frame). Unset, a side comes from the driver's embodiment (each arm its own
    # box: none inherits another's); with neither, the agent refuses to start.
    workspace_low: tuple[float, float, float] | None = None  # the TCP box's lower corner
    workspace_high: tuple[float, float, float] | None = None  # the TCP box's upper corner
    max_translation_m: float = 0.03  # the longest step the TCP target may take per tick
    max_rotation_rad: float = 0.2  # the largest turn of the TCP target per tick
    max_gripper_change: float = 1.0  # normalised gripper units per step (the full range is 2)
    # The commanded target never leads the measured TCP by more than this: a stalled or lagging arm
    # cannot store up a jump, and the speed toward a wall (hence the overshoot past it) stays bounded.
    max_target_lead_m: float = 0.03
    max_rotation_lead_rad: float = 0.2  # the same for orientation (commanded vs measured)
    max_orientation_change_rad: float = 1.6  # how far the TCP may turn from its orientation at episode start
    watchdog_periods: float = 2.0  # hold when no valid action arrived within this many control periods
    max_action_age_ms: float = 500.0  # reject chunks answering an observation older than this

    def __post_init__(self) -> None:
        for side in (self.workspace_low, self.workspace_high):
            if side is not None and np.asarray(side).shape != (3,):
                raise ValueError(f"safety workspace corners must have 3 values, got {side}")
        if self.workspace_low is not None and self.workspace_high is not None:
            low, high = np.asarray(self.workspace_low), np.asarray(self.workspace_high)
            if not (low < high).all():
                raise ValueError(f"safety workspace must be 3 lows below 3 highs, got {low} / {high}")
        for name in (
            "max_translation_m",
            "max_rotation_rad",
            "max_gripper_change",
            "watchdog_periods",
            "max_target_lead_m",
            "max_rotation_lead_rad",
            "max_orientation_change_rad",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"safety.{name} must be > 0, got {getattr(self, name)}")
        if self.max_action_age_ms <= 0:
            raise ValueError(f"safety.max_action_age_ms must be > 0, got {self.max_action_age_ms}")

    def for_embodiment(self, embodiment: Embodiment | None, robot: str = "this robot") -> SafetyConfig:
        """These limits with each unset workspace corner taken from ``embodiment``'s default box."""
        low = (
            self.workspace_low
            if self.workspace_low is not None
            else getattr(embodiment, "workspace_low", None)
        )
        high = (
            self.workspace_high
            if self.workspace_high is not None
            else getattr(embodiment, "workspace_high", None)
        )
        if low is None or high is None:
            missing = "safety.workspace_low" if low is None else "safety.workspace_high"
            raise ValueError(
                f"{robot} declares no embodiment, so it has no default workspace box: set {missing} "
                "(and its pair) in the agent's [safety] section"
            )
        return replace(self, workspace_low=tuple(low), workspace_high=tuple(high))

    def sim_limits(self) -> dict[str, float]:
        """These limits as the MuJoCo Franka sim's ``env.kwargs`` (its ``ROBOT_LIMITS``), so a policy
        trains in the sim under the limits the agent will hold it to on the robot."""
        return {
            "max_step_translation_m": self.max_translation_m,
            "max_step_rotation_rad": self.max_rotation_rad,
            "max_target_lead_m": self.max_target_lead_m,
            "max_orientation_change_rad": self.max_orientation_change_rad,
            "max_rotation_lead_rad": self.max_rotation_lead_rad,
        }


@dataclass(frozen=True)
class ArmScaling:
    """How one arm's normalised ee-delta action maps to metres / radians, and where it sits.

    ``prefix`` selects the arm's action dims and state fields: ``""`` for a single arm
    (``dx`` ... ``gripper``, ``tcp_pos``), ``"left_"`` / ``"right_"`` for a dual-arm robot.
    """

    max_translation_m: float
    max_rotation_rad: float
    prefix: str = ""


QUAT_NORM_TOLERANCE = 0.05  # a measured orientation further from unit norm is not one


class UnusableState(ValueError):
    """The robot's measured state cannot bound an action (a NaN or a non-unit quaternion): hold."""


@dataclass(frozen=True)
class TcpPose:
    """One arm's commanded TCP: position in metres, orientation as a (w, x, y, z) quaternion if known."""

    position: np.ndarray
    quat: np.ndarray | None = None


@dataclass(frozen=True)
class _ArmLayout:
    scaling: ArmScaling
    translation: list[int]  # action dims
    rotation: list[int]
    gripper: int
    tcp_pos: slice  # state fields
    tcp_quat: slice | None


class SafetyFilter:
    """Rejects malformed chunks and limits each action to what the robot may do in one step."""

    def __init__(
        self,
        spec: EnvSpec,
        arms: tuple[ArmScaling, ...],
        config: SafetyConfig,
        embodiment: Embodiment | None = None,
    ) -> None:
        """``config``'s unset workspace corners come from ``embodiment`` (the driver's)."""
        config = config.for_embodiment(embodiment, f"robot spec {spec.name!r}")
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
            self._arms.append(
                _ArmLayout(arm, translation, rotation, gripper, tcp, slices.get(p + "tcp_quat"))
            )
        self._low = np.asarray(config.workspace_low)
        self._high = np.asarray(config.workspace_high)
        self._start_rotations: list[np.ndarray | None] = [None] * len(self._arms)
        self._last_measured: list[np.ndarray | None] = [None] * len(self._arms)

    def begin_episode(self) -> None:
        """Forget the references: the next measured pose is the episode's start (orientation, speed)."""
        self._start_rotations = [None] * len(self._arms)
        self._last_measured = [None] * len(self._arms)

    def check_chunk(self, chunk: np.ndarray) -> np.ndarray:
        """Return ``float32[n, dim]`` or raise :class:`ContractError` (shape, NaN/inf, range)."""
        chunk = validate_action(self.spec, chunk, allow_chunk=True)
        return chunk[None] if chunk.ndim == 1 else chunk

    def limit(
        self,
        action: np.ndarray,
        state: np.ndarray,
        last_action: np.ndarray | None,
        targets: tuple[TcpPose, ...] | None = None,
    ) -> tuple[np.ndarray, list[str]]:
        """Limit one valid action; returns the safe action and what was clipped.

        Deltas move each arm's commanded TCP (``targets``, one per arm, from the driver) when known,
        else the measured TCP in ``state``. The new target must lie in the box and within the lead
        of the measured TCP, and may move at most one step from the old one.
        """
        self._check_measured(state, targets)
        safe = np.array(action, dtype=np.float64)
        events: list[str] = []
        for i, arm in enumerate(self._arms):
            commanded = targets[i] if targets is not None else None
            measured = np.asarray(state[arm.tcp_pos], np.float64)
            last, self._last_measured[i] = self._last_measured[i], measured
            coming = measured if last is None else 2 * measured - last  # where it is heading, a step on
            self._limit_translation(arm, safe, measured, coming, commanded, events)
            if arm.rotation:
                self._limit_rotation(i, arm, safe, state, commanded, events)
            if last_action is not None:
                previous = float(last_action[arm.gripper])
                step = self.config.max_gripper_change
                clipped = float(np.clip(safe[arm.gripper], previous - step, previous + step))
                if clipped != safe[arm.gripper]:
                    safe[arm.gripper] = clipped
                    events.append(f"clipped:{arm.scaling.prefix}gripper_rate")
        low, high = self.spec.action.low_array(), self.spec.action.high_array()
        safe = np.clip(safe, low, high).astype(np.float32)
        if not np.isfinite(safe).all():  # the last line: a non-finite command never reaches the robot
            raise UnusableState(f"the limited action is not finite: {safe.tolist()}")
        return safe, events

    def _check_measured(self, state: np.ndarray, targets: tuple[TcpPose, ...] | None) -> None:
        """Every limit is taken from the measured TCP (and the commanded one): both must be real poses."""
        for i, arm in enumerate(self._arms):
            prefix = arm.scaling.prefix
            if not np.isfinite(state[arm.tcp_pos]).all():
                raise UnusableState(
                    f"the measured {prefix}tcp_pos is not finite: {state[arm.tcp_pos].tolist()}"
                )
            if arm.rotation and arm.tcp_quat is not None:
                quat = np.asarray(state[arm.tcp_quat], np.float64)
                if (
                    not np.isfinite(quat).all()
                    or abs(float(np.linalg.norm(quat)) - 1.0) > QUAT_NORM_TOLERANCE
                ):
                    raise UnusableState(
                        f"the measured {prefix}tcp_quat is not a unit quaternion: {quat.tolist()}"
                    )
            commanded = targets[i] if targets is not None else None
            if commanded is not None and not np.isfinite(commanded.position).all():
                raise UnusableState(f"the commanded {prefix}TCP is not finite: {list(commanded.position)}")

    def _limit_translation(
        self, arm: _ArmLayout, safe: np.ndarray, measured: np.ndarray, coming: np.ndarray,
        commanded: TcpPose | None, events: list[str],
    ) -> None:  # fmt: skip
        cfg, prefix = self.config, arm.scaling.prefix
        base = measured if commanded is None else np.asarray(commanded.position, np.float64)
        delta = cap_norm(safe[arm.translation] * arm.scaling.max_translation_m, cfg.max_translation_m)
        if not np.allclose(delta, safe[arm.translation] * arm.scaling.max_translation_m):
            events.append(f"clipped:{prefix}translation")
        # Within the lead of the measured TCP: a stalled or lagging arm cannot store up a jump. The
        # step is shortened along its own direction; only a target already too far ahead is pulled back.
        target = base + shorten_into_ball(base - measured, delta, cfg.max_target_lead_m)
        if not np.allclose(target, base + delta):
            events.append(f"clipped:{prefix}lead")
        # Inside the box. Brake: where the TCP is (or is heading) past a wall, that wall moves in by as
        # much, so a lagging or coasting arm is pulled back rather than held at a wall it crossed.
        past, before = np.maximum(measured, coming), np.minimum(measured, coming)
        high = self._high - np.maximum(past - self._high, 0.0)
        low = self._low + np.maximum(self._low - before, 0.0)
        boxed = np.clip(target, low, np.maximum(high, low))
        if not np.allclose(boxed, target):
            events.append(f"clipped:{prefix}workspace")
        # The target itself moves at most one step, so the controller never sees a jump.
        safe[arm.translation] = cap_norm(boxed - base, cfg.max_translation_m) / arm.scaling.max_translation_m

    def _limit_rotation(
        self, index: int, arm: _ArmLayout, safe: np.ndarray, state: np.ndarray,
        commanded: TcpPose | None, events: list[str],
    ) -> None:  # fmt: skip
        cfg, prefix = self.config, arm.scaling.prefix
        rotvec = safe[arm.rotation] * arm.scaling.max_rotation_rad
        if arm.tcp_quat is None:  # no measured orientation: the per-step limit is all we can do
            if float(np.linalg.norm(rotvec)) > cfg.max_rotation_rad:
                events.append(f"clipped:{prefix}rotation")
            safe[arm.rotation] = cap_norm(rotvec, cfg.max_rotation_rad) / arm.scaling.max_rotation_rad
            return
        measured = quat_to_matrix(state[arm.tcp_quat])
        if self._start_rotations[index] is None:
            self._start_rotations[index] = measured
        base = measured if commanded is None or commanded.quat is None else quat_to_matrix(commanded.quat)
        step, clipped = guarded_rotation_step(
            rotvec, base, self._start_rotations[index], measured,
            cfg.max_rotation_rad, cfg.max_orientation_change_rad, cfg.max_rotation_lead_rad,
        )  # fmt: skip
        events.extend(f"clipped:{prefix}{limit}" for limit in clipped)
        safe[arm.rotation] = step / arm.scaling.max_rotation_rad


__all__ = ["ArmScaling", "ContractError", "SafetyConfig", "SafetyFilter", "TcpPose"]
