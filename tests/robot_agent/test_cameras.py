"""Cameras: background capture with stamped latest frames; vendor drivers tested through their module seam."""

import time
from types import SimpleNamespace

import numpy as np
import pytest

from robot_agent.cameras import CameraConfig, CameraError, make_camera
from robot_agent.cameras.realsense import RealSenseCamera
from robot_agent.cameras.sim import SimCamera
from robot_agent.cameras.zed import ZedCamera

SMALL = {"width": 8, "height": 6, "fps": 200.0}


def counter_render(shape=(6, 8, 3)):
    count = [0]

    def render():
        count[0] += 1
        return np.full(shape, count[0] % 256, np.uint8)

    return render


def test_capture_runs_in_the_background_and_read_latest_never_waits():
    with SimCamera(CameraConfig("sim", "front", **SMALL), counter_render()) as cam:
        first = cam.wait_for_frame()
        time.sleep(0.1)
        start = time.monotonic()
        latest = cam.read_latest(max_age_s=0.5)
        assert time.monotonic() - start < 0.01
    assert latest.index > first.index and latest.capture_ns > first.capture_ns
    assert int(latest.image[0, 0, 0]) == (latest.index + 1) % 256


def test_a_stale_frame_is_refused():
    cam = SimCamera(CameraConfig("sim", "front", **SMALL), counter_render()).start()
    cam.wait_for_frame()
    cam.stop()  # capture stopped: the newest frame only ages
    time.sleep(0.06)
    with pytest.raises(CameraError, match="ms old"):
        cam.read_latest(max_age_s=0.05)


def test_a_camera_giving_the_wrong_shape_fails_loudly():
    cam = SimCamera(CameraConfig("sim", "front", **SMALL), counter_render(shape=(480, 640, 3)))
    cam.max_consecutive_failures = 3
    with (
        cam,
        pytest.raises(CameraError, match=r"failed: expected uint8\[6, 8, 3\], got uint8\[480, 640, 3\]"),
    ):
        cam.wait_for_frame(timeout_s=5.0)  # gives up as soon as capture has failed


class FakeRealSense:
    """The slice of pyrealsense2 the driver uses; the frame buffer is reused like the SDK's."""

    camera_info = SimpleNamespace(serial_number="serial_number")
    stream = SimpleNamespace(color="color")
    format = SimpleNamespace(rgb8="rgb8")

    def __init__(self, serials=("123",)):
        self.serials = serials
        self.enabled = []
        self.buffer = np.zeros((6, 8, 3), np.uint8)
        outer = self

        class Device:
            def __init__(self, serial):
                self.serial = serial

            def get_info(self, _):
                return self.serial

        class Context:
            def query_devices(self):
                return [Device(s) for s in outer.serials]

        class Config:
            def enable_device(self, serial):
                outer.enabled.append(("device", serial))

            def enable_stream(self, *args):
                outer.enabled.append(("stream", *args))

        class Frame:
            def __bool__(self):
                return True

            def get_data(self):
                return outer.buffer

        class Frames:
            def get_color_frame(self):
                return Frame()

        class Pipeline:
            def start(self, cfg):
                outer.started = True

            def wait_for_frames(self, timeout_ms):
                time.sleep(0.005)
                outer.buffer += 1  # the SDK overwrites its buffer in place
                return Frames()

            def stop(self):
                outer.started = False

        self.context, self.config, self.pipeline = Context, Config, Pipeline


def test_realsense_configures_the_serial_and_copies_recycled_buffers():
    rs = FakeRealSense(serials=("111", "123"))
    cam = RealSenseCamera(CameraConfig("realsense", "wrist", serial="123", **SMALL), rs=rs)
    with cam:
        first = cam.wait_for_frame()
        value = int(first.image[0, 0, 0])
        time.sleep(0.05)
        assert int(first.image[0, 0, 0]) == value  # our copy did not change under us
        assert cam.read_latest().index > first.index
    assert ("device", "123") in rs.enabled
    assert ("stream", "color", 8, 6, "rgb8", 200) in rs.enabled
    assert rs.started is False


def test_realsense_missing_serial_or_device_is_one_clear_error():
    with pytest.raises(CameraError, match=r"serial 999 is not connected; connected: \['123'\]"):
        RealSenseCamera(CameraConfig("realsense", "wrist", serial="999", **SMALL), rs=FakeRealSense()).start()
    with pytest.raises(CameraError, match="no RealSense device"):
        RealSenseCamera(CameraConfig("realsense", "wrist", **SMALL), rs=FakeRealSense(serials=())).start()


def test_zed_without_the_sdk_names_it():
    with pytest.raises(CameraError, match=r"ZED SDK.*pyzed\.sl.*unrelated"):
        ZedCamera(CameraConfig("zed", "front", width=1280, height=720)).start()


def test_zed_converts_bgra_to_rgb():
    bgra = np.zeros((376, 672, 4), np.uint8)
    bgra[..., 0], bgra[..., 1], bgra[..., 2], bgra[..., 3] = 10, 20, 30, 255
    success = "SUCCESS"

    class Camera:
        def open(self, params):
            return success

        def grab(self, runtime):
            time.sleep(0.005)
            return success

        def retrieve_image(self, mat, view):
            mat.data = bgra

        def close(self):
            pass

    class Mat:
        def get_data(self):
            return self.data

    class InitParameters:
        def set_from_serial_number(self, serial):
            self.serial = serial

    sl = SimpleNamespace(
        InitParameters=InitParameters,
        RESOLUTION=SimpleNamespace(VGA="VGA"),
        DEPTH_MODE=SimpleNamespace(NONE="NONE"),
        ERROR_CODE=SimpleNamespace(SUCCESS=success),
        VIEW=SimpleNamespace(LEFT="LEFT"),
        Camera=Camera,
        Mat=Mat,
        RuntimeParameters=lambda: None,
    )
    with ZedCamera(CameraConfig("zed", "front", width=672, height=376, fps=30, serial="42"), sl=sl) as cam:
        frame = cam.wait_for_frame()
    assert frame.image.shape == (376, 672, 3)
    assert frame.image[0, 0].tolist() == [30, 20, 10]


def test_opencv_converts_bgr_and_unknown_kinds_are_named():
    bgr = np.zeros((6, 8, 3), np.uint8)
    bgr[..., 0] = 200  # blue

    class Capture:
        def __init__(self, source):
            self.source = source

        def isOpened(self):  # noqa: N802 (OpenCV's name)
            return self.source == 0

        def set(self, *args):
            pass

        def read(self):
            time.sleep(0.005)
            return True, bgr

        def release(self):
            pass

    cv2 = SimpleNamespace(
        VideoCapture=Capture,
        CAP_PROP_FRAME_WIDTH=3,
        CAP_PROP_FRAME_HEIGHT=4,
        CAP_PROP_FPS=5,
        COLOR_BGR2RGB="bgr2rgb",
        cvtColor=lambda img, code: img[..., ::-1],
        resize=lambda img, size: img,
    )
    with make_camera(CameraConfig("opencv", "front", **SMALL), cv2=cv2) as cam:
        assert cam.wait_for_frame().image[0, 0].tolist() == [0, 0, 200]
    with pytest.raises(CameraError, match="cannot open OpenCV device '/dev/video7'"):
        make_camera(CameraConfig("opencv", "front", device="/dev/video7", **SMALL), cv2=cv2).start()
    with pytest.raises(CameraError, match="unknown camera kind 'kinect'"):
        make_camera(CameraConfig("kinect", "front"))
