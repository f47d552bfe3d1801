"""The camera interface: capture runs on a background thread; the control loop only reads the latest frame."""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)


class CameraError(RuntimeError):
    """A camera is missing, failed, or has no fresh frame."""


@dataclass(frozen=True)
class CameraConfig:
    """One camera on the robot PC. ``name`` is the camera's name in the env spec."""

    kind: str  # "realsense", "zed", "opencv" or "sim"
    name: str
    width: int = 640
    height: int = 480
    fps: float = 30.0
    serial: str = ""  # RealSense / ZED serial number; empty: the only connected device
    device: str = "0"  # OpenCV: a V4L index ("0") or a device path / URL

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0 or self.fps <= 0:
            raise ValueError(f"camera {self.name!r}: width, height and fps must be > 0")


@dataclass(frozen=True)
class StampedFrame:
    """An RGB frame and when it was captured (agent monotonic clock, ns)."""

    image: np.ndarray
    capture_ns: int
    index: int


class Camera(ABC):
    """Subclasses open the device and grab one RGB frame at a time; this class runs the capture thread."""

    max_consecutive_failures = 30

    def __init__(self, config: CameraConfig) -> None:
        self.config = config
        self._latest: StampedFrame | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: str | None = None
        self.frames_captured = 0

    @abstractmethod
    def _open(self) -> None:
        """Connect to the device; raise :class:`CameraError` with what was expected if it is not there."""

    @abstractmethod
    def _grab(self) -> np.ndarray:
        """Block until the next frame and return it as ``uint8[height, width, 3]`` RGB."""

    def _close(self) -> None:  # noqa: B027  (optional hook)
        """Release the device."""

    # -- public API ------------------------------------------------------------------------------
    def start(self) -> Camera:
        self._open()
        self._thread = threading.Thread(
            target=self._capture_loop, name=f"camera-{self.config.name}", daemon=True
        )
        self._thread.start()
        return self

    def read_latest(self, max_age_s: float | None = None) -> StampedFrame:
        """The newest frame, without waiting; raises if there is none yet, it is too old, or capture failed."""
        with self._lock:
            frame, failure = self._latest, self._failure
        name = self.config.name
        if failure is not None:
            raise CameraError(f"camera {name!r} failed: {failure}")
        if frame is None:
            raise CameraError(f"camera {name!r} has no frame yet")
        if max_age_s is not None:
            age = (time.monotonic_ns() - frame.capture_ns) / 1e9
            if age > max_age_s:
                raise CameraError(
                    f"camera {name!r}: newest frame is {age * 1000:.0f} ms old (max {max_age_s * 1000:.0f})"
                )
        return frame

    def wait_for_frame(self, timeout_s: float = 5.0) -> StampedFrame:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                return self.read_latest()
            except CameraError:
                if self._failure is not None:
                    raise
                time.sleep(0.005)
        raise CameraError(f"camera {self.config.name!r} gave no frame within {timeout_s} s")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        self._close()

    def __enter__(self) -> Camera:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- capture thread ----------------------------------------------------------------------------
    def _capture_loop(self) -> None:
        failures = 0
        expected = (self.config.height, self.config.width, 3)
        while not self._stop.is_set():
            try:
                image = self._grab()
                stamp = time.monotonic_ns()
                if image.shape != expected or image.dtype != np.uint8:
                    raise CameraError(f"expected uint8{list(expected)}, got {image.dtype}{list(image.shape)}")
            except Exception as exc:
                failures += 1
                log.warning("camera %s: %s", self.config.name, exc)
                if failures >= self.max_consecutive_failures:
                    with self._lock:
                        self._failure = str(exc)
                    return
                continue
            failures = 0
            with self._lock:
                self._latest = StampedFrame(image, stamp, self.frames_captured)
                self.frames_captured += 1
