"""A 3Dconnexion SpaceMouse through pyspacemouse (raw HID; ``pip install .[spacemouse]``, plus libhidapi).

Pushing the cap past the dead zone takes over; letting go gives back (HIL-SERL style). Button 0
toggles the gripper, button 1 labels the episode a success (ending it) and, between episodes,
starts the next one.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from robot_agent.teleop.base import TeleopDevice, TeleopError, TeleopLost, TeleopReading


@dataclass(frozen=True)
class SpaceMouseConfig:
    deadzone: float = 0.08  # motion below this on every axis counts as hands off
    device: str = ""  # a pyspacemouse device name; "" takes the first found
    module: str = "pyspacemouse"  # the library (tests inject a stand-in)


class SpaceMouseDevice(TeleopDevice):
    """6-DoF motion plus two buttons."""

    kind = "spacemouse"
    waits_for_start = True

    def __init__(self, config: SpaceMouseConfig) -> None:
        self.config = config
        try:
            self.lib: ModuleType = importlib.import_module(config.module)
        except ImportError as exc:
            raise TeleopError(
                f"the spacemouse needs {config.module} (pip install '.[spacemouse]' and apt-get install libhidapi0): {exc}"
            ) from None
        opened = self.lib.open(device=config.device) if config.device else self.lib.open()
        if not opened:
            raise TeleopError("no SpaceMouse found (is it plugged in, and may this user read /dev/hidraw*?)")
        self._gripper_closed = False
        self._buttons = [0, 0]

    def poll(self) -> TeleopReading:
        try:
            state = self.lib.read()
        except OSError as exc:  # hidapi reports an unplugged device as an I/O error
            raise TeleopLost(f"SpaceMouse read failed: {exc}") from None
        if state is None:
            raise TeleopLost("SpaceMouse returned no state (unplugged?)")
        motion = np.array([state.x, state.y, state.z, state.roll, state.pitch, state.yaw], np.float32)
        buttons = [*list(getattr(state, "buttons", None) or getattr(state, "button", None) or [0, 0]), 0, 0]
        pressed = [b and not old for b, old in zip(buttons[:2], self._buttons)]
        self._buttons = buttons[:2]
        gripper = None
        if pressed[0]:
            self._gripper_closed = not self._gripper_closed
            gripper = self._gripper_closed
        moving = bool(np.abs(motion).max() > self.config.deadzone)
        return TeleopReading(
            motion=np.where(np.abs(motion) > self.config.deadzone, motion, 0.0).astype(np.float32),
            gripper_closed=gripper,
            takeover=moving or gripper is not None,
            label="success" if pressed[1] else None,
            start=bool(pressed[1]),
        )

    def close(self) -> None:
        close = getattr(self.lib, "close", None)
        if close is not None:
            close()
