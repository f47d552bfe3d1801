"""USB / V4L cameras (and video files or streams) through OpenCV (extra ``.[opencv]``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from robot_agent.cameras.base import Camera, CameraConfig, CameraError


def import_cv2() -> Any:
    try:
        import cv2
    except ImportError as exc:
        raise CameraError(f"the opencv camera needs OpenCV: pip install '.[opencv]' ({exc})") from None
    return cv2


class OpenCVCamera(Camera):
    """``device`` is a V4L index ("0") or a path / URL. ``cv2`` is injectable for tests."""

    def __init__(self, config: CameraConfig, cv2: Any = None) -> None:
        super().__init__(config)
        self._cv2 = cv2
        self._capture: Any = None

    def _open(self) -> None:
        cv2 = self._cv2 = self._cv2 or import_cv2()
        device = self.config.device
        source: int | str = int(device) if device.isdigit() else device
        capture = cv2.VideoCapture(source)
        if not capture.isOpened():
            raise CameraError(f"camera {self.config.name!r}: cannot open OpenCV device {device!r}")
        capture.set(cv2.CAP_PROP_FRAME_WIDTH, self.config.width)
        capture.set(cv2.CAP_PROP_FRAME_HEIGHT, self.config.height)
        capture.set(cv2.CAP_PROP_FPS, self.config.fps)
        self._capture = capture

    def _grab(self) -> np.ndarray:
        ok, frame = self._capture.read()
        if not ok:
            raise CameraError("read failed")
        if frame.shape[:2] != (self.config.height, self.config.width):
            frame = self._cv2.resize(frame, (self.config.width, self.config.height))
        return self._cv2.cvtColor(frame, self._cv2.COLOR_BGR2RGB)

    def _close(self) -> None:
        if self._capture is not None:
            self._capture.release()
            self._capture = None
