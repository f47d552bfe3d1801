"""Stereolabs ZED left-eye colour stream via the ZED SDK's ``pyzed.sl`` (not on PyPI)."""

from __future__ import annotations

from typing import Any

import numpy as np

from robot_agent.cameras.base import Camera, CameraConfig, CameraError

# (width, height) -> ZED resolution name
RESOLUTIONS = {(672, 376): "VGA", (1280, 720): "HD720", (1920, 1080): "HD1080", (2208, 1242): "HD2K"}


def import_pyzed() -> Any:
    try:
        import pyzed.sl as sl
    except ImportError:
        raise CameraError(
            "the zed camera needs the ZED SDK's Python API (pyzed.sl): install the ZED SDK, then run its "
            "get_python_api.py. The PyPI package named 'pyzed' is unrelated."
        ) from None
    return sl


class ZedCamera(Camera):
    """One ZED camera, selected by serial; the left image, converted from BGRA to RGB. ``sl`` is injectable."""

    def __init__(self, config: CameraConfig, sl: Any = None) -> None:
        super().__init__(config)
        if (config.width, config.height) not in RESOLUTIONS:
            raise CameraError(
                f"camera {config.name!r}: ZED sizes are {sorted(RESOLUTIONS)}, got {config.width}x{config.height}"
            )
        self._sl = sl
        self._zed: Any = None
        self._mat: Any = None

    def _open(self) -> None:
        sl = self._sl = self._sl or import_pyzed()
        params = sl.InitParameters()
        params.camera_resolution = getattr(
            sl.RESOLUTION, RESOLUTIONS[(self.config.width, self.config.height)]
        )
        params.camera_fps = int(self.config.fps)
        params.depth_mode = sl.DEPTH_MODE.NONE
        if self.config.serial:
            params.set_from_serial_number(int(self.config.serial))
        zed = sl.Camera()
        status = zed.open(params)
        if status != sl.ERROR_CODE.SUCCESS:
            which = f"serial {self.config.serial}" if self.config.serial else "any ZED"
            raise CameraError(f"camera {self.config.name!r}: cannot open {which}: {status}")
        self._zed, self._mat, self._runtime = zed, sl.Mat(), sl.RuntimeParameters()

    def _grab(self) -> np.ndarray:
        sl = self._sl
        status = self._zed.grab(self._runtime)
        if status != sl.ERROR_CODE.SUCCESS:
            raise CameraError(f"grab failed: {status}")
        self._zed.retrieve_image(self._mat, sl.VIEW.LEFT)
        bgra = self._mat.get_data()
        return np.ascontiguousarray(bgra[:, :, 2::-1])  # BGRA -> RGB, a copy the SDK will not overwrite

    def _close(self) -> None:
        if self._zed is not None:
            self._zed.close()
            self._zed = None
