"""Identified physics: the sim parameters that ``rlinf-calibrate sysid`` fits to robot episodes.

A physics file holds one value per parameter of :class:`PhysicsParams` (the dynamics knobs of
:class:`~sim_envs.randomization.DomainRandomization`, and the perception offset of object positions
on the table plane). The sim reads it with ``env.kwargs.physics_file=PATH``; domain randomisation
then varies *around* the fitted values (scale ranges multiply them, latency ranges and the offset add
to them), so one can train on "the identified robot, give or take".
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from protos.atomic_files import write_atomic
from protos.typed_config import check_known_keys
from protos.user_error import UserError
from sim_envs.errors import EnvConfigError
from sim_envs.randomization import DomainRandomization

PHYSICS_FORMAT = "rlinf-physics-v1"


@dataclass(frozen=True)
class ParameterRange:
    """Where the fit may look for one parameter, and its value in the nominal sim."""

    nominal: float
    low: float
    high: float
    unit: str = ""


# What a robot's episodes can tell apart; visual knobs (camera, light, colour) are not here.
SEARCH_RANGES = {
    "friction_scale": ParameterRange(1.0, 0.3, 2.0),
    "object_mass_scale": ParameterRange(1.0, 0.3, 3.0),
    "actuator_gain_scale": ParameterRange(1.0, 0.5, 1.5),
    "control_latency_ms": ParameterRange(0.0, 0.0, 80.0, "ms"),
    "object_position_bias_x_m": ParameterRange(0.0, -0.05, 0.05, "m"),
    "object_position_bias_y_m": ParameterRange(0.0, -0.05, 0.05, "m"),
}
# Offsets, which may be negative; the rest are scales (> 0) or a latency (>= 0).
SIGNED_PARAMETERS = ("object_position_bias_x_m", "object_position_bias_y_m")


class PhysicsFileError(UserError, ValueError):
    """A physics file that cannot be used; the message is one line naming the file and the problem."""


@dataclass(frozen=True)
class PhysicsParams:
    """Fixed values of the sim's dynamics parameters (the nominal sim is all defaults)."""

    friction_scale: float = 1.0
    object_mass_scale: float = 1.0
    actuator_gain_scale: float = 1.0
    control_latency_ms: float = 0.0
    # Where perception puts objects on the table plane, minus where they are (metres).
    object_position_bias_x_m: float = 0.0
    object_position_bias_y_m: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise EnvConfigError(f"{f.name} must be a finite number, got {value!r}")
            if f.name in SIGNED_PARAMETERS:
                continue
            if value < 0:
                raise EnvConfigError(f"{f.name} must be a finite number >= 0, got {value!r}")
            if f.name != "control_latency_ms" and value == 0:
                raise EnvConfigError(f"{f.name} must be > 0, got {value!r}")

    def around(self, randomization: DomainRandomization) -> DomainRandomization:
        """``randomization`` re-centred on these values: scale ranges multiply, latency and the
        perception offset add."""

        def scaled(name: str) -> tuple[float, float]:
            low, high = getattr(randomization, name)
            return (low * getattr(self, name), high * getattr(self, name))

        low, high = randomization.control_latency_ms
        bias_x, bias_y, bias_z = randomization.object_position_bias_m
        return replace(
            randomization,
            friction_scale=scaled("friction_scale"),
            object_mass_scale=scaled("object_mass_scale"),
            actuator_gain_scale=scaled("actuator_gain_scale"),
            control_latency_ms=(low + self.control_latency_ms, high + self.control_latency_ms),
            object_position_bias_m=(
                bias_x + self.object_position_bias_x_m,
                bias_y + self.object_position_bias_y_m,
                bias_z,
            ),
        )


def physics_between(start: PhysicsParams, end: PhysicsParams, fraction: float) -> PhysicsParams:
    """Each parameter ``fraction`` of the way from ``start`` to ``end`` (0: start, 1: end)."""
    if fraction <= 0.0:
        return start
    if fraction >= 1.0:
        return end
    return PhysicsParams(
        **{
            f.name: getattr(start, f.name) + fraction * (getattr(end, f.name) - getattr(start, f.name))
            for f in fields(PhysicsParams)
        }
    )


def load_physics_file(path: str | Path) -> PhysicsParams:
    """The parameters in a physics file, or a :class:`PhysicsFileError` naming what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise PhysicsFileError(
            f"physics file {str(path)!r} does not exist (make one with rlinf-calibrate sysid)"
        )
    try:
        document = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PhysicsFileError(f"physics file {str(path)!r} is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != PHYSICS_FORMAT:
        raise PhysicsFileError(f"physics file {str(path)!r} is not a {PHYSICS_FORMAT} file")
    params = document.get("params")
    if not isinstance(params, dict):
        raise PhysicsFileError(f"physics file {str(path)!r} has no 'params' object")
    check_known_keys(PhysicsParams, params, f"physics file {str(path)!r}", PhysicsFileError)
    try:
        return PhysicsParams(**params)
    except ValueError as exc:
        raise PhysicsFileError(f"physics file {str(path)!r}: {exc}") from None


def write_physics_file(path: str | Path, params: PhysicsParams, task: str, fit: dict) -> None:
    """Write ``params`` (with the fit's report, for people) atomically."""
    document = {"format": PHYSICS_FORMAT, "task": task, "params": asdict(params), "fit": fit}
    write_atomic(path, json.dumps(document, indent=2) + "\n")
