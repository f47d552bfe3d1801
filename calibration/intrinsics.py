"""Camera intrinsics from ChArUco views: K, distortion, image size and RMS reprojection error."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibration.board import BoardSpec, CalibrationError, Detection, detect, import_cv2
from protos.atomic_files import write_atomic

FORMAT_VERSION = 1


@dataclass(frozen=True)
class IntrinsicsConfig:
    """What a calibration must reach before it is accepted."""

    min_views: int = 10
    min_coverage: float = 0.35  # fraction of the image's 4x4 grid cells that saw a corner
    min_tilt_deg: float = 15.0  # at least some views must be tilted this much (focal length needs it)
    max_rms_px: float = 1.0


@dataclass(frozen=True)
class Intrinsics:
    """A calibrated pinhole camera with OpenCV's (k1, k2, p1, p2, k3) distortion."""

    K: np.ndarray
    dist: np.ndarray
    width: int
    height: int
    rms_px: float
    views: int

    @property
    def fx(self) -> float:
        return float(self.K[0, 0])

    @property
    def fy(self) -> float:
        return float(self.K[1, 1])

    @property
    def cx(self) -> float:
        return float(self.K[0, 2])

    @property
    def cy(self) -> float:
        return float(self.K[1, 2])

    def fovy_deg(self) -> float:
        """The vertical field of view a simulator camera needs to match (MuJoCo's ``fovy``)."""
        return float(np.degrees(2.0 * np.arctan(self.height / (2.0 * self.fy))))

    def to_dict(self) -> dict:
        return {
            "K": self.K.tolist(),
            "dist": self.dist.reshape(-1).tolist(),
            "width": self.width,
            "height": self.height,
            "rms_px": self.rms_px,
            "views": self.views,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Intrinsics:
        return cls(
            np.asarray(data["K"], float),
            np.asarray(data["dist"], float),
            int(data["width"]),
            int(data["height"]),
            float(data["rms_px"]),
            int(data["views"]),
        )


def calibrate_intrinsics(
    images: list[np.ndarray], spec: BoardSpec, config: IntrinsicsConfig | None = None
) -> Intrinsics:
    """Calibrate from photos of the board; reject results that are not trustworthy, saying why."""
    config = config or IntrinsicsConfig()
    detections, failures = [], []
    for index, image in enumerate(images):
        try:
            detections.append(detect(image, spec))
        except CalibrationError as exc:
            failures.append(f"view {index}: {exc}")
    if not detections and failures:
        raise CalibrationError(failures[0])
    return calibrate_from_detections(detections, config)


def calibrate_from_detections(detections: list[Detection], config: IntrinsicsConfig) -> Intrinsics:
    cv2 = import_cv2()
    if len(detections) < config.min_views:
        raise CalibrationError(
            f"{len(detections)} usable views, need {config.min_views}: capture more views of the board"
        )
    sizes = {d.image_size for d in detections}
    if len(sizes) != 1:
        raise CalibrationError(f"views have different image sizes {sorted(sizes)}: use one camera mode")
    width, height = sizes.pop()
    coverage = _coverage(detections, width, height)
    if coverage < config.min_coverage:
        raise CalibrationError(
            f"the board covered {coverage:.0%} of the image (need {config.min_coverage:.0%}): "
            "move it into the corners and edges of the view"
        )
    rms, K, dist, rvecs, _ = cv2.calibrateCamera(
        [d.object_points for d in detections],
        [d.image_points for d in detections],
        (width, height),
        None,
        None,
    )
    tilts = [_tilt_deg(cv2, r) for r in rvecs]
    if max(tilts) < config.min_tilt_deg:
        raise CalibrationError(
            f"the board was never tilted more than {max(tilts):.0f} deg (need {config.min_tilt_deg:.0f}): "
            "tilt it toward and away from the camera in some views"
        )
    if rms > config.max_rms_px:
        raise CalibrationError(
            f"reprojection RMS {rms:.2f} px is over {config.max_rms_px} px: check the board is flat, "
            "its square size is right, and the images are sharp"
        )
    return Intrinsics(np.asarray(K), np.asarray(dist).reshape(-1), width, height, float(rms), len(detections))


def _coverage(detections: list[Detection], width: int, height: int, grid: int = 4) -> float:
    cells = set()
    for d in detections:
        for x, y in d.image_points:
            cells.add((min(int(x * grid / width), grid - 1), min(int(y * grid / height), grid - 1)))
    return len(cells) / grid**2


def _tilt_deg(cv2, rvec: np.ndarray) -> float:
    """Angle between the board normal and the camera's optical axis."""
    rotation, _ = cv2.Rodrigues(rvec)
    return float(np.degrees(np.arccos(np.clip(abs(rotation[2, 2]), 0.0, 1.0))))


# -- the calibration file --------------------------------------------------------------------------
def save_intrinsics(path: str | Path, serial: str, intrinsics: Intrinsics) -> None:
    """Add or replace ``serial``'s entry in a versioned JSON file, atomically (temp file + rename)."""
    path = Path(path)
    data = load_calibration_file(path) if path.exists() else {"version": FORMAT_VERSION, "cameras": {}}
    data["cameras"][serial] = {**intrinsics.to_dict(), "calibrated_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    write_json_atomic(path, data)


def load_intrinsics(path: str | Path, serial: str) -> Intrinsics:
    cameras = load_calibration_file(Path(path))["cameras"]
    if serial not in cameras:
        raise CalibrationError(f"{path} has no camera {serial!r}; it has {sorted(cameras)}")
    return Intrinsics.from_dict(cameras[serial])


def load_calibration_file(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CalibrationError(f"cannot read calibration file {path}: {exc}") from None
    if data.get("version") != FORMAT_VERSION:
        raise CalibrationError(f"{path} has format version {data.get('version')}, expected {FORMAT_VERSION}")
    return data


def write_json_atomic(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=2))
