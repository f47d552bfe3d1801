"""Teleop devices on the robot PC: one small class per device, hardware libraries imported lazily."""

from __future__ import annotations

import importlib
from typing import Any

from robot_agent.config import dataclass_from_dict
from robot_agent.teleop.base import TeleopDevice, TeleopError, TeleopLost, TeleopMapper, TeleopReading

# kind -> (module, device class, config class)
DEVICES: dict[str, tuple[str, str, str]] = {
    "replay": ("robot_agent.teleop.replay", "ReplayDevice", "ReplayConfig"),
    "keyboard": ("robot_agent.teleop.keyboard", "KeyboardDevice", "KeyboardConfig"),
    "spacemouse": ("robot_agent.teleop.spacemouse", "SpaceMouseDevice", "SpaceMouseConfig"),
    "expert": ("robot_agent.teleop.expert", "ExpertDevice", "ExpertConfig"),  # sim twin only
}


def make_teleop(kind: str, config: dict[str, Any] | None = None) -> TeleopDevice:
    """Open the device ``kind`` from a plain config dict (unknown keys are named in the error)."""
    if kind not in DEVICES:
        raise TeleopError(f"unknown teleop device {kind!r}; known: {sorted(DEVICES)}")
    module_name, device_name, config_name = DEVICES[kind]
    module = importlib.import_module(module_name)
    config_obj = dataclass_from_dict(
        getattr(module, config_name), config or {}, where=f"{kind} teleop config"
    )
    return getattr(module, device_name)(config_obj)


__all__ = [
    "DEVICES",
    "TeleopDevice",
    "TeleopError",
    "TeleopLost",
    "TeleopMapper",
    "TeleopReading",
    "make_teleop",
]
