"""The ChArUco calibration board: its geometry, a printable image of it, and detection in photos."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from protos.user_error import UserError


class CalibrationError(UserError, ValueError):
    """Calibration input or result is not good enough; the message says what to do."""


def import_cv2():
    try:
        import cv2
    except ImportError as exc:
        raise CalibrationError(
            f"calibration needs OpenCV with aruco: pip install '.[calibration]' ({exc})"
        ) from None
    if not hasattr(cv2, "aruco"):
        raise CalibrationError("this OpenCV has no aruco module: pip install opencv-contrib-python-headless")
    return cv2


@dataclass(frozen=True)
class BoardSpec:
    """A ChArUco board: ``squares_x`` x ``squares_y`` chessboard squares with ArUco markers inside."""

    squares_x: int = 7
    squares_y: int = 5
    square_length_m: float = 0.04
    marker_length_m: float = 0.03
    dictionary: str = "DICT_5X5_100"

    def __post_init__(self) -> None:
        if self.squares_x < 3 or self.squares_y < 3:
            raise CalibrationError(
                f"a ChArUco board needs at least 3x3 squares, got {self.squares_x}x{self.squares_y}"
            )
        if not 0 < self.marker_length_m < self.square_length_m:
            raise CalibrationError("marker_length_m must be positive and smaller than square_length_m")

    @property
    def width_m(self) -> float:
        return self.squares_x * self.square_length_m

    @property
    def height_m(self) -> float:
        return self.squares_y * self.square_length_m

    @property
    def corner_count(self) -> int:
        return (self.squares_x - 1) * (self.squares_y - 1)

    def build(self):
        cv2 = import_cv2()
        if not hasattr(cv2.aruco, self.dictionary):
            raise CalibrationError(f"unknown ArUco dictionary {self.dictionary!r}, e.g. 'DICT_5X5_100'")
        dictionary = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, self.dictionary))
        return cv2.aruco.CharucoBoard(
            (self.squares_x, self.squares_y), self.square_length_m, self.marker_length_m, dictionary
        )

    def render(self, pixels_per_square: int = 100, margin_squares: float = 0.5) -> np.ndarray:
        """A grey-scale image of the board with a white margin (print it, or texture a sim with it)."""
        margin = round(margin_squares * pixels_per_square)
        size = (
            self.squares_x * pixels_per_square + 2 * margin,
            self.squares_y * pixels_per_square + 2 * margin,
        )
        return self.build().generateImage(size, marginSize=margin, borderBits=1)


@dataclass(frozen=True)
class Detection:
    """ChArUco corners found in one image: pixel positions and board-frame 3D points, matched by id."""

    ids: np.ndarray  # int [n]
    image_points: np.ndarray  # float32 [n, 2]
    object_points: np.ndarray  # float32 [n, 3], board frame (metres, z = 0)
    image_size: tuple[int, int]  # (width, height)


def detect(image: np.ndarray, spec: BoardSpec, min_corners: int = 6) -> Detection:
    """Find the board's inner corners; raise :class:`CalibrationError` saying what was expected."""
    cv2 = import_cv2()
    gray = image if image.ndim == 2 else cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    board = spec.build()
    detector = cv2.aruco.CharucoDetector(board)
    corners, ids, _, marker_ids = detector.detectBoard(gray)
    expected = f"a {spec.squares_x}x{spec.squares_y} ChArUco board ({spec.dictionary})"
    if marker_ids is None or len(marker_ids) == 0:
        other = _other_dictionary(gray, spec)
        hint = f"; markers of {other} are visible: wrong dictionary?" if other else ""
        raise CalibrationError(f"no board in view: expected {expected}{hint}")
    if ids is None or len(ids) < min_corners:
        found = 0 if ids is None else len(ids)
        raise CalibrationError(
            f"only {found} ChArUco corners found (need {min_corners}): is the board {expected}? "
            "Bring it closer or in focus"
        )
    object_points, image_points = board.matchImagePoints(corners, ids)
    return Detection(
        ids=ids.reshape(-1).astype(np.int32),
        image_points=image_points.reshape(-1, 2).astype(np.float32),
        object_points=object_points.reshape(-1, 3).astype(np.float32),
        image_size=(gray.shape[1], gray.shape[0]),
    )


def _other_dictionary(gray: np.ndarray, spec: BoardSpec) -> str | None:
    """Name a common dictionary whose markers are in the image, to explain an empty detection."""
    cv2 = import_cv2()
    for name in ("DICT_4X4_50", "DICT_5X5_100", "DICT_6X6_250", "DICT_7X7_250", "DICT_APRILTAG_36h11"):
        if name == spec.dictionary:
            continue
        dictionary = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, name))
        _, ids, _ = cv2.aruco.ArucoDetector(dictionary).detectMarkers(gray)
        if ids is not None and len(ids) >= 2:
            return name
    return None
