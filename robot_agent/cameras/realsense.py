"""Intel RealSense colour stream via ``pyrealsense2`` (extra ``.[realsense]``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from robot_agent.cameras.base import Camera, CameraConfig, CameraError


def import_pyrealsense2() -> Any:
    try:
        import pyrealsense2
    except ImportError as exc:
        raise CameraError(
            f"the realsense camera needs pyrealsense2: pip install '.[realsense]' (and apt libusb-1.0-0) ({exc})"
        ) from None
    return pyrealsense2


class RealSenseCamera(Camera):
    """One RealSense device, selected by serial; frames are RGB8 at the configured size and rate.

    ``rs`` is the ``pyrealsense2`` module; tests pass a stand-in with the same API.
    """

    def __init__(self, config: CameraConfig, rs: Any = None) -> None:
        super().__init__(config)
        self._rs = rs
        self._pipeline: Any = None

    def _open(self) -> None:
        rs = self._rs = self._rs or import_pyrealsense2()
        serials = [d.get_info(rs.camera_info.serial_number) for d in rs.context().query_devices()]
        if not serials:
            raise CameraError(f"camera {self.config.name!r}: no RealSense device is connected")
        if self.config.serial and self.config.serial not in serials:
            raise CameraError(
                f"camera {self.config.name!r}: RealSense serial {self.config.serial} is not connected; "
                f"connected: {serials}"
            )
        cfg = rs.config()
        cfg.enable_device(self.config.serial or serials[0])
        cfg.enable_stream(
            rs.stream.color, self.config.width, self.config.height, rs.format.rgb8, int(self.config.fps)
        )
        self._pipeline = rs.pipeline()
        self._pipeline.start(cfg)

    def _grab(self) -> np.ndarray:
        frames = self._pipeline.wait_for_frames(1000)
        color = frames.get_color_frame()
        if not color:
            raise CameraError("frame set without a colour frame")
        # The SDK recycles the frame's buffer: copy before handing it to another thread.
        return np.asanyarray(color.get_data()).copy()

    def _close(self) -> None:
        if self._pipeline is not None:
            self._pipeline.stop()
            self._pipeline = None
