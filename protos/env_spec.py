"""The env contract: what every env, simulated or real, tells the trainer about itself.

Pure Python + numpy so that the robot agent can import it without any heavy dependency.

Observation layout (one env):
    {"images": {camera_name: uint8[H, W, 3]}, "state": float32[D], "instruction": str}
Batched layout (N envs): the same keys with a leading N axis, and a list of N instructions.
Actions are float32[action_dim] for one step or float32[chunk, action_dim] for a chunk.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Action kinds that envs and drivers understand.
EE_DELTA_POSE_GRIPPER = "ee_delta_pose+gripper"
JOINT_POSITION = "joint_position"
BOX = "box"  # any bounded continuous action of an outside env (the gymnasium adapter); no robot runs it
ACTION_KINDS = (EE_DELTA_POSE_GRIPPER, JOINT_POSITION, BOX)
# The characters an instruction may use (a gymnasium Text space's charset in the envs' observation spaces).
INSTRUCTION_CHARSET = string.ascii_letters + string.digits + " .,;:!?'-_/()"
# How far a camera's frames may be scaled down (per side) to cross a slow link; see CameraSpec.
LINK_DOWNSCALES = (1, 2, 4, 8)


@dataclass(frozen=True)
class CameraSpec:
    """One named camera: image height, width and frame rate.

    ``max_downscale`` (1, 2, 4 or 8; it must divide height and width) is how far ``link.codec=auto``
    may shrink each side of a frame to keep the control rate on a slow link; the trainer restores the
    declared size, so the policy always sees ``height x width``. 1: frames cross at full resolution.
    """

    name: str
    height: int
    width: int
    fps: float
    max_downscale: int = 1

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.height, self.width, 3)


# Default bounds of a state field, by what its name says it holds (first match wins); a spec may
# declare its own. Values outside a field's bounds are refused at the step, so that no episode can
# put absurd (if finite) values into a dataset's statistics.
STATE_BOUNDS_BY_KIND: tuple[tuple[tuple[str, ...], tuple[float, float]], ...] = (
    (("quat",), (-1.01, 1.01)),  # unit quaternions
    (("force", "torque", "wrench", "effort"), (-1e4, 1e4)),  # N, N m
    (("vel",), (-100.0, 100.0)),  # m/s, rad/s
    (("pos", "rel", "width", "distance", "joint"), (-100.0, 100.0)),  # m, rad
)
DEFAULT_STATE_BOUNDS = (-1e4, 1e4)  # anything else
DEFAULT_REWARD_RANGE = (-1e3, 1e3)  # per step


@dataclass(frozen=True)
class StateField:
    """A named slice of the state vector, e.g. ``StateField("ee_pos", 3)``. ``low`` / ``high``: the
    range every value of the field stays in (None: the default for its kind, :func:`default_bounds`)."""

    name: str
    size: int
    low: float | None = None
    high: float | None = None

    @property
    def bounds(self) -> tuple[float, float]:
        default = default_bounds(self.name)
        return (
            default[0] if self.low is None else self.low,
            default[1] if self.high is None else self.high,
        )


def default_bounds(field_name: str) -> tuple[float, float]:
    """The bounds a state field of this name gets unless its spec declares its own."""
    name = field_name.lower()
    for words, bounds in STATE_BOUNDS_BY_KIND:
        if any(word in name for word in words):
            return bounds
    return DEFAULT_STATE_BOUNDS


@dataclass(frozen=True)
class ActionSpace:
    """The action space: its kind, per-dimension names and bounds."""

    kind: str
    names: tuple[str, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ValueError(f"action kind {self.kind!r} is not one of {ACTION_KINDS}")
        if not (len(self.names) == len(self.low) == len(self.high)):
            raise ValueError(
                f"action names/low/high lengths differ: {len(self.names)}/{len(self.low)}/{len(self.high)}"
            )
        for i, (lo, hi) in enumerate(zip(self.low, self.high)):
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise ValueError(f"action bound {i} ({self.names[i]}) must be finite, got [{lo}, {hi}]")
            if not lo < hi:
                raise ValueError(f"action bound {i} ({self.names[i]}): low {lo} >= high {hi}")

    @property
    def dim(self) -> int:
        return len(self.names)

    def low_array(self) -> np.ndarray:
        return np.asarray(self.low, dtype=np.float32)

    def high_array(self) -> np.ndarray:
        return np.asarray(self.high, dtype=np.float32)

    def to_unit(self, actions: np.ndarray) -> np.ndarray:
        """Actions in the env's bounds -> [-1, 1] (the policies' units), clipped."""
        low, high = self.low_array(), self.high_array()
        return np.clip(2.0 * (np.asarray(actions) - low) / (high - low) - 1.0, -1.0, 1.0).astype(np.float32)


@dataclass(frozen=True)
class EnvSpec:
    """Everything the trainer needs to know about an env: the single source of shapes."""

    name: str
    cameras: tuple[CameraSpec, ...]
    state_fields: tuple[StateField, ...]
    action: ActionSpace
    control_hz: float
    instruction: str
    max_episode_steps: int
    metadata: Mapping[str, Any] = field(default_factory=dict)
    reward_range: tuple[float, float] = DEFAULT_REWARD_RANGE  # a step's reward stays in [low, high]

    def __post_init__(self) -> None:
        names = [c.name for c in self.cameras]
        if len(set(names)) != len(names):
            raise ValueError(f"camera names must be unique, got {names}")
        fields = [f.name for f in self.state_fields]
        if len(set(fields)) != len(fields):
            raise ValueError(f"state field names must be unique, got {fields}")
        if not (math.isfinite(self.control_hz) and self.control_hz > 0):
            raise ValueError(f"control_hz must be a finite number > 0, got {self.control_hz}")
        for cam in self.cameras:
            if cam.height < 1 or cam.width < 1:
                raise ValueError(f"camera {cam.name!r} must be at least 1x1, got {cam.height}x{cam.width}")
            if not (math.isfinite(cam.fps) and cam.fps > 0):
                raise ValueError(f"camera {cam.name!r} fps must be a finite number > 0, got {cam.fps}")
            if cam.max_downscale not in LINK_DOWNSCALES:
                raise ValueError(
                    f"camera {cam.name!r} max_downscale must be one of {LINK_DOWNSCALES}, got {cam.max_downscale}"
                )
            if cam.height % cam.max_downscale or cam.width % cam.max_downscale:
                raise ValueError(
                    f"camera {cam.name!r} max_downscale {cam.max_downscale} does not divide its {cam.height}x{cam.width}"
                )
        for f in self.state_fields:
            if f.size < 1:
                raise ValueError(f"state field {f.name!r} must have size >= 1, got {f.size}")
            low, high = f.bounds
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise ValueError(
                    f"state field {f.name!r} bounds must be finite with low < high, got [{low}, {high}]"
                )
        low, high = self.reward_range
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"reward_range must be finite with low < high, got [{low}, {high}]")
        if self.max_episode_steps <= 0:
            raise ValueError(f"max_episode_steps must be > 0, got {self.max_episode_steps}")

    @property
    def state_dim(self) -> int:
        return sum(f.size for f in self.state_fields)

    @property
    def camera_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cameras)

    def camera(self, name: str) -> CameraSpec:
        for cam in self.cameras:
            if cam.name == name:
                return cam
        raise KeyError(f"no camera {name!r}; this env has {list(self.camera_names)}")

    def state_slices(self) -> dict[str, slice]:
        """Map each state field name to its slice of the state vector."""
        slices, start = {}, 0
        for f in self.state_fields:
            slices[f.name] = slice(start, start + f.size)
            start += f.size
        return slices

    @functools.cached_property
    def state_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-dimension ``(low, high)`` of the state vector, float32."""
        low = [f.bounds[0] for f in self.state_fields for _ in range(f.size)]
        high = [f.bounds[1] for f in self.state_fields for _ in range(f.size)]
        return np.asarray(low, np.float32), np.asarray(high, np.float32)

    def state_names(self) -> list[str]:
        """A name per state dimension: ``tcp_pos.0``, ``tcp_pos.1`` ... (a 1-D field keeps its name)."""
        return [f.name if f.size == 1 else f"{f.name}.{i}" for f in self.state_fields for i in range(f.size)]

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (JSON / protobuf friendly)."""
        return {
            "name": self.name,
            "cameras": [
                {"name": c.name, "height": c.height, "width": c.width, "fps": c.fps}
                | (
                    {"max_downscale": c.max_downscale} if c.max_downscale != 1 else {}
                )  # older files stay as they were
                for c in self.cameras
            ],
            "state_fields": [
                {"name": f.name, "size": f.size}
                | ({"low": f.low} if f.low is not None else {})
                | ({"high": f.high} if f.high is not None else {})
                for f in self.state_fields
            ],
            "action": {
                "kind": self.action.kind,
                "names": list(self.action.names),
                "low": list(self.action.low),
                "high": list(self.action.high),
            },
            "control_hz": self.control_hz,
            "instruction": self.instruction,
            "max_episode_steps": self.max_episode_steps,
            "metadata": dict(self.metadata),
        } | ({"reward_range": list(self.reward_range)} if self.reward_range != DEFAULT_REWARD_RANGE else {})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EnvSpec:
        action = data["action"]
        return cls(
            name=data["name"],
            cameras=tuple(CameraSpec(**c) for c in data["cameras"]),
            state_fields=tuple(StateField(**f) for f in data["state_fields"]),
            action=ActionSpace(
                kind=action["kind"],
                names=tuple(action["names"]),
                low=tuple(float(x) for x in action["low"]),
                high=tuple(float(x) for x in action["high"]),
            ),
            control_hz=float(data["control_hz"]),
            instruction=data["instruction"],
            max_episode_steps=int(data["max_episode_steps"]),
            metadata=dict(data.get("metadata", {})),
            reward_range=tuple(float(x) for x in data.get("reward_range", DEFAULT_REWARD_RANGE)),
        )


def with_max_downscale(spec: EnvSpec, factor: int) -> EnvSpec:
    """``spec`` with every camera's frames allowed on the link at down to 1/``factor`` of each side."""
    try:
        cameras = tuple(dataclasses.replace(c, max_downscale=factor) for c in spec.cameras)
        return dataclasses.replace(spec, cameras=cameras)
    except ValueError as exc:
        raise ValueError(f"link.max_downscale: {exc}") from None


PREVIOUS_ACTION = "previous_action"


def with_previous_action(spec: EnvSpec) -> EnvSpec:
    """``spec`` whose state ends with the action last chosen (``previous_action``: the policy's or the
    human's, before any limits; zeros before an episode's first). With control latency the previous
    command is still in force for part of each step, and a state without it is not Markov: a policy
    cannot tell what its last action is still doing. Sims and the robot agent append it the same
    way, so their specs match."""
    if PREVIOUS_ACTION in spec.state_slices():
        return spec
    return dataclasses.replace(
        spec, state_fields=(*spec.state_fields, StateField(PREVIOUS_ACTION, spec.action.dim))
    )


def ee_delta_action_space(rotation: bool = True) -> ActionSpace:
    """Normalised end-effector delta pose + gripper action in [-1, 1] (gripper: +1 open, -1 close)."""
    names: Sequence[str] = ("dx", "dy", "dz")
    if rotation:
        names = (*names, "droll", "dpitch", "dyaw")
    names = (*names, "gripper")
    return ActionSpace(
        kind=EE_DELTA_POSE_GRIPPER,
        names=tuple(names),
        low=(-1.0,) * len(names),
        high=(1.0,) * len(names),
    )


def spec_mismatch(expected: EnvSpec, given: EnvSpec, who: str = "the robot") -> str | None:
    """Why envs of spec ``given`` cannot stand in for ``expected`` (what a policy or a run was built
    for), or None. State fields are compared by name, size and order: a robot whose fields are the
    right total size in another order would feed a policy the wrong values without any error."""
    want = [(f.name, f.size) for f in expected.state_fields]
    have = [(f.name, f.size) for f in given.state_fields]
    if want != have:
        first = next((i for i, (w, h) in enumerate(zip(want, have)) if w != h), min(len(want), len(have)))
        show = lambda fields: ", ".join(f"{n}[{s}]" for n, s in fields)  # noqa: E731
        return f"state fields differ from field {first} on: expected {show(want)}; {who} has {show(have)}"
    if expected.action.dim != given.action.dim:
        return f"expected action dim {expected.action.dim}, {who} has {given.action.dim}"
    missing = sorted(set(expected.camera_names) - set(given.camera_names))
    if missing:
        return f"{who} lacks cameras {missing}"
    for name in expected.camera_names:
        if expected.camera(name).shape != given.camera(name).shape:
            return f"camera {name!r}: expected {expected.camera(name).shape}, {who} sends {given.camera(name).shape}"
    return None
