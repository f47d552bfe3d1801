"""The wire codec: round trips, and errors (never big allocations) for messages that lie about their size."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space

ROOT = Path(__file__).resolve().parents[2]


def spec() -> EnvSpec:
    return EnvSpec(
        name="test/arm",
        cameras=(CameraSpec("front", 48, 64, 20.0), CameraSpec("wrist", 32, 32, 20.0)),
        state_fields=(StateField("tcp_pos", 3), StateField("gripper_width", 1)),
        action=ee_delta_action_space(),
        control_hz=20.0,
        instruction="lift the cube",
        max_episode_steps=100,
        metadata={"simulator": "mujoco"},
    )


def image(h=48, w=64, seed=0) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    rng = np.random.default_rng(seed)
    base = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1) % 256
    return (base + rng.integers(0, 8, base.shape)).astype(np.uint8)


def test_generated_code_is_current():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_protos.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_spec_round_trips_through_the_wire():
    original = spec()
    wire = pb.EnvSpec.FromString(link_codec.spec_to_proto(original).SerializeToString())
    assert link_codec.spec_from_proto(wire) == original


def test_an_invalid_spec_is_a_codec_error():
    msg = link_codec.spec_to_proto(spec())
    msg.action.low[0] = 5.0  # low above high
    with pytest.raises(link_codec.LinkCodecError, match="invalid env spec"):
        link_codec.spec_from_proto(msg)


def test_raw_frames_round_trip_exactly():
    img = image()
    frame = link_codec.encode_frame("front", img, codec="raw")
    np.testing.assert_array_equal(link_codec.decode_frame(frame, spec().camera("front")), img)


@pytest.mark.parametrize(("height", "width"), [(1, 1), (7, 13), (120, 160), (480, 640)])
def test_raw_frames_cross_the_wire_bit_exact_at_any_size(height, width):
    """Through a serialised and parsed observation, as on the link (odd sizes included)."""
    img = np.random.default_rng(height).integers(0, 256, (height, width, 3), dtype=np.uint8)
    sent = pb.Observation(seq=1, frames=[link_codec.encode_frame("front", img, codec="raw")])
    received = pb.Observation.FromString(sent.SerializeToString())
    decoded = link_codec.decode_frame(received.frames[0], CameraSpec("front", height, width, 20.0))
    np.testing.assert_array_equal(decoded, img)


def test_jpeg_frames_round_trip_closely_and_into_a_reused_buffer():
    img = image()
    frame = link_codec.encode_frame("front", img, codec="jpeg", quality=95)
    out = np.empty_like(img)
    decoded = link_codec.decode_frame(frame, spec().camera("front"), out=out)
    assert decoded.shape == img.shape
    assert np.abs(decoded.astype(int) - img.astype(int)).mean() < 6
    assert np.shares_memory(decoded, out)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda f: setattr(f, "height", 480), "expected 48x64"),
        (lambda f: setattr(f, "data", f.data[:100]), "raw frame has 100 bytes"),
        (lambda f: setattr(f, "codec", 99), "unknown codec"),
    ],
)
def test_raw_frames_that_lie_are_rejected(mutate, message):
    frame = link_codec.encode_frame("front", image(), codec="raw")
    mutate(frame)
    with pytest.raises(link_codec.LinkCodecError, match=message):
        link_codec.decode_frame(frame, spec().camera("front"))


def test_jpeg_that_lies_about_its_size_or_is_garbage_is_rejected():
    frame = link_codec.encode_frame("front", image(), codec="jpeg")
    frame.height, frame.width = 64, 64
    with pytest.raises(link_codec.LinkCodecError, match="JPEG is 48x64"):
        link_codec.decode_frame(frame)
    junk = pb.Frame(camera="front", codec=pb.CODEC_JPEG, height=48, width=64, data=b"\xff\xd8garbage")
    with pytest.raises(link_codec.LinkCodecError, match="front"):
        link_codec.decode_frame(junk)
    huge = pb.Frame(camera="front", codec=pb.CODEC_RAW_RGB8, height=100_000, width=100_000, data=b"")
    with pytest.raises(link_codec.LinkCodecError, match="bad frame size"):
        link_codec.decode_frame(huge)


def test_decode_images_needs_exactly_the_spec_cameras():
    frames = [link_codec.encode_frame("front", image(), codec="raw")]
    with pytest.raises(link_codec.LinkCodecError, match="cameras expected"):
        link_codec.decode_images(frames, spec())


def test_action_chunks_round_trip_and_shape_lies_are_rejected():
    actions = np.arange(14, dtype=np.float32).reshape(2, 7) / 20
    msg = link_codec.chunk_to_proto(actions, obs_seq=5, max_age_ms=100)
    np.testing.assert_array_equal(link_codec.chunk_from_proto(msg), actions)
    msg.chunk_len = 3
    with pytest.raises(link_codec.LinkCodecError, match="carries 14 values"):
        link_codec.chunk_from_proto(msg)
    with pytest.raises(link_codec.LinkCodecError, match="bad shape"):
        link_codec.chunk_from_proto(pb.ActionChunk(chunk_len=100_000, action_dim=7))
