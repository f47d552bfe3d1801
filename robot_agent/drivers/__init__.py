"""Robot drivers, one module each, imported lazily so that a robot PC needs only its own vendor library."""

from __future__ import annotations

import importlib
from typing import Any

from protos.user_error import UserError
from robot_agent.config import dataclass_from_dict
from robot_agent.drivers.base import (
    DriverCapabilities,
    DriverError,
    DriverObservation,
    RobotDriver,
    StepOutcome,
)

# kind -> (module, driver class, config class)
DRIVERS: dict[str, tuple[str, str, str]] = {
    "sim-twin": ("robot_agent.drivers.sim_twin", "SimTwinDriver", "SimTwinConfig"),
    "franka": ("robot_agent.drivers.franka", "FrankaDriver", "FrankaConfig"),
    "dual-franka": ("robot_agent.drivers.dual_franka", "DualFrankaDriver", "DualFrankaConfig"),
    "ur5e": ("robot_agent.drivers.ur5e", "UR5eDriver", "UR5eConfig"),
}


class UnknownDriverError(UserError, ValueError):
    """No driver of that kind."""


def make_driver(kind: str, config: dict[str, Any] | None = None) -> RobotDriver:
    """Build the driver ``kind`` from a plain config dict (unknown keys are named in the error)."""
    if kind not in DRIVERS:
        raise UnknownDriverError(f"unknown robot kind {kind!r}; known: {sorted(DRIVERS)}")
    module_name, driver_name, config_name = DRIVERS[kind]
    module = importlib.import_module(module_name)
    config_obj = dataclass_from_dict(getattr(module, config_name), config or {}, where=f"{kind} config")
    try:
        return getattr(module, driver_name)(config_obj)
    except ValueError as exc:  # a value the driver cannot use (an unknown twin task, a bad preset)
        raise UnknownDriverError(f"[driver] of {kind}: {' '.join(str(exc).split())}") from None


__all__ = [
    "DRIVERS",
    "DriverCapabilities",
    "DriverError",
    "DriverObservation",
    "RobotDriver",
    "StepOutcome",
    "UnknownDriverError",
    "make_driver",
]
