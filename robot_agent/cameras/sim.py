"""A camera fed by a render function (a MuJoCo view, a recorded clip): the same capture path as hardware."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from robot_agent.cameras.base import Camera, CameraConfig


class SimCamera(Camera):
    """Calls ``render()`` at the configured frame rate on the capture thread."""

    def __init__(self, config: CameraConfig, render: Callable[[], np.ndarray]) -> None:
        super().__init__(config)
        self._render = render
        self._next = 0.0

    def _open(self) -> None:
        self._next = time.monotonic()

    def _grab(self) -> np.ndarray:
        delay = self._next - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        self._next = max(self._next + 1.0 / self.config.fps, time.monotonic())
        return self._render()
