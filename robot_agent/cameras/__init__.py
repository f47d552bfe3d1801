"""Cameras on the robot PC: one small class per kind, each capturing on its own thread."""

from __future__ import annotations

from typing import Any

from robot_agent.cameras.base import Camera, CameraConfig, CameraError, StampedFrame

KINDS = ("realsense", "zed", "opencv")  # "sim" cameras need a render function: build SimCamera directly


def make_camera(config: CameraConfig, **seams: Any) -> Camera:
    """Build a hardware camera; its vendor library is imported only when it starts."""
    if config.kind == "realsense":
        from robot_agent.cameras.realsense import RealSenseCamera

        return RealSenseCamera(config, **seams)
    if config.kind == "zed":
        from robot_agent.cameras.zed import ZedCamera

        return ZedCamera(config, **seams)
    if config.kind == "opencv":
        from robot_agent.cameras.opencv import OpenCVCamera

        return OpenCVCamera(config, **seams)
    raise CameraError(f"unknown camera kind {config.kind!r}; known: {list(KINDS)} (and 'sim' in code)")


__all__ = ["KINDS", "Camera", "CameraConfig", "CameraError", "StampedFrame", "make_camera"]
