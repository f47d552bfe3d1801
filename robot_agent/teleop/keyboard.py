"""Keyboard teleop in the terminal the agent runs in (no X server needed on a robot PC).

Keys: ``w``/``s`` +x/-x, ``a``/``d`` +y/-y, ``r``/``f`` +z/-z, ``space`` toggles the gripper,
``t`` takes over / gives back, ``y`` / ``n`` label the episode a success / failure (ending it), and
``Enter`` starts the next episode once the scene is reset. Each key press moves for one tick at
``step`` of full scale.
"""

from __future__ import annotations

import os
import select
import sys
from dataclasses import dataclass

import numpy as np

from robot_agent.teleop.base import TeleopDevice, TeleopError, TeleopLost, TeleopReading

MOTION_KEYS = {"w": (0, 1), "s": (0, -1), "a": (1, 1), "d": (1, -1), "r": (2, 1), "f": (2, -1)}


@dataclass(frozen=True)
class KeyboardConfig:
    step: float = 0.5  # motion per key press, as a fraction of full scale
    fd: int = -1  # the terminal to read; -1: this process's stdin


def read_keys(fd: int) -> str:
    """Every key waiting on ``fd``, without blocking."""
    keys = []
    while select.select([fd], [], [], 0.0)[0]:
        chunk = os.read(fd, 64)
        if not chunk:
            raise TeleopLost("the terminal closed")
        keys.append(chunk.decode(errors="ignore"))
    return "".join(keys)


class KeyboardDevice(TeleopDevice):
    """Reads single key presses from a terminal in cbreak mode."""

    kind = "keyboard"
    waits_for_start = True

    def __init__(self, config: KeyboardConfig) -> None:
        self.config = config
        self.fd = config.fd if config.fd >= 0 else sys.stdin.fileno()
        self._saved = None
        if os.isatty(self.fd):
            import termios
            import tty

            self._saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        elif config.fd < 0:
            raise TeleopError("keyboard teleop needs an interactive terminal on stdin")
        self.takeover = False
        self.gripper_closed = False

    def poll(self) -> TeleopReading:
        motion = np.zeros(6, np.float32)
        gripper, label, start = None, None, False
        for key in read_keys(self.fd):
            if key in MOTION_KEYS:
                axis, sign = MOTION_KEYS[key]
                motion[axis] = np.clip(motion[axis] + sign * self.config.step, -1.0, 1.0)
            elif key == " ":
                self.gripper_closed = not self.gripper_closed
                gripper = self.gripper_closed
            elif key == "t":
                self.takeover = not self.takeover
            elif key in ("y", "n"):
                label = "success" if key == "y" else "failure"
            elif key in ("\n", "\r"):
                start = True
        return TeleopReading(
            motion=motion, gripper_closed=gripper, takeover=self.takeover, label=label, start=start
        )

    def close(self) -> None:
        if self._saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None
