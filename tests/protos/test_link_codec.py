"""The wire codec: round trips, and errors (never big allocations) for messages that lie about their size."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space, with_max_downscale

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


# -- frames sent at a lower resolution (link.codec=auto on a slow link) -------------------------------
def downscaling(max_downscale: int) -> CameraSpec:
    return CameraSpec("front", 48, 64, 20.0, max_downscale)


def test_shrinking_averages_each_block_rather_than_picking_a_pixel():
    checker = np.zeros((4, 4, 3), np.uint8)
    checker[::2, ::2] = checker[1::2, 1::2] = 255  # a 1-pixel checkerboard: every 2x2 block is half white
    np.testing.assert_array_equal(link_codec.shrink(checker, 2), np.full((2, 2, 3), 128, np.uint8))


@pytest.mark.parametrize("factor", [2, 4, 8])
def test_shrink_is_each_blocks_mean_rounded_and_enlarge_repeats_each_pixel(factor):
    frame = np.random.default_rng(factor).integers(0, 256, (61, 83, 3), dtype=np.uint8)  # sides not multiples
    height, width = 61 // factor, 83 // factor
    blocks = frame[: height * factor, : width * factor].astype(np.float64)
    mean = blocks.reshape(height, factor, width, factor, 3).mean(axis=(1, 3))
    np.testing.assert_array_equal(link_codec.shrink(frame, factor), np.floor(mean + 0.5).astype(np.uint8))

    small = frame[:height, :width]
    repeated = np.repeat(np.repeat(small, factor, axis=0), factor, axis=1)
    np.testing.assert_array_equal(link_codec.enlarge(small, factor), repeated)
    out = np.zeros_like(repeated)
    assert link_codec.enlarge(small, factor, out) is out
    np.testing.assert_array_equal(out, repeated)


def test_a_downscaled_frame_crosses_smaller_and_comes_back_at_the_declared_size():
    blocky = np.repeat(
        np.repeat(image(12, 16), 4, axis=0), 4, axis=1
    )  # constant 4x4 blocks: shrinking loses nothing
    raw = link_codec.encode_frame("front", blocky, codec="raw", downscale=4)
    assert (raw.height, raw.width, raw.downscale, len(raw.data)) == (48, 64, 4, 12 * 16 * 3)
    received = pb.Frame.FromString(raw.SerializeToString())
    np.testing.assert_array_equal(link_codec.decode_frame(received, downscaling(4)), blocky)

    y, x = np.mgrid[0:240, 0:320]  # a smooth scene, big enough that the JPEG headers do not dominate
    smooth = np.stack([x * 255 / 320, y * 255 / 240, (x + y) * 127 / 560], axis=-1).astype(np.uint8)
    full = link_codec.encode_frame("front", smooth, codec="jpeg", quality=50)
    half = link_codec.encode_frame("front", smooth, codec="jpeg", quality=50, downscale=2)
    assert len(half.data) < 0.6 * len(full.data)
    out = np.empty_like(smooth)
    decoded = link_codec.decode_frame(half, CameraSpec("front", 240, 320, 20.0, 2), out=out)
    assert decoded.shape == smooth.shape and np.shares_memory(decoded, out)
    assert np.abs(decoded.astype(int) - smooth.astype(int)).mean() < 12


def test_a_downscale_the_camera_does_not_declare_is_refused():
    frame = link_codec.encode_frame("front", image(), codec="jpeg", downscale=4)
    for camera in (downscaling(1), downscaling(2)):
        with pytest.raises(link_codec.LinkCodecError, match="downscale 4 of 48x64 is not allowed"):
            link_codec.decode_frame(frame, camera)
    obs = pb.Observation(
        seq=1, state=[0.0] * 4, frames=[frame, link_codec.encode_frame("wrist", image(32, 32))]
    )
    with pytest.raises(link_codec.LinkCodecError, match="downscale 4"):
        link_codec.check_observation(obs, spec())
    lying = link_codec.encode_frame("front", image(), codec="raw", downscale=2)
    lying.downscale = 4  # the data is 24x32, the frame says 12x16
    with pytest.raises(link_codec.LinkCodecError, match="raw frame has 2304 bytes, expected 576"):
        link_codec.decode_frame(lying, downscaling(4))
    with pytest.raises(ValueError, match="downscale must be one of"):
        link_codec.encode_frame("front", image(), downscale=3)


def test_a_spec_declaring_a_downscale_round_trips_and_a_bad_one_is_refused():
    declared = EnvSpec(**{**spec().__dict__, "cameras": (downscaling(4), CameraSpec("wrist", 32, 32, 20.0))})
    wire = pb.EnvSpec.FromString(link_codec.spec_to_proto(declared).SerializeToString())
    assert link_codec.spec_from_proto(wire).camera("front").max_downscale == 4
    assert EnvSpec.from_dict(declared.to_dict()) == declared
    assert "max_downscale" not in spec().to_dict()["cameras"][0]  # specs without one are written as before
    wire.cameras[0].max_downscale = 3
    with pytest.raises(link_codec.LinkCodecError, match="max_downscale must be one of"):
        link_codec.spec_from_proto(wire)
    wire.cameras[0].max_downscale = 8  # 48x64 / 8 = 6x8, but the wrist's 32x32 is not touched: fine
    assert link_codec.spec_from_proto(wire).camera("front").max_downscale == 8
    with pytest.raises(
        ValueError, match=r"link.max_downscale: camera 'front' max_downscale 8 does not divide its 36x64"
    ):
        with_max_downscale(EnvSpec(**{**spec().__dict__, "cameras": (CameraSpec("front", 36, 64, 20.0),)}), 8)


def test_an_observation_message_put_together_from_raw_pixels_parses_as_the_one_built_whole():
    """The agent's raw in-band path: the pixels go into the sent bytes once (from image arrays), and
    the trainer parses exactly the message that would have been built with the pixels in it."""
    pixels = {"front": image(), "wrist": image(32, 32, seed=1)}
    jpeg = link_codec.encode_frame("side", image(seed=2), codec="jpeg")
    raw_frames = [pb.Frame(camera=c, codec=pb.CODEC_RAW_RGB8, height=p.shape[0], width=p.shape[1],
                           capture_mono_ns=7) for c, p in pixels.items()]  # fmt: skip
    obs = pb.Observation(seq=4, frames=[raw_frames[0], jpeg, raw_frames[1]], state=[0.5] * 4, step=2)
    whole = pb.Observation()
    whole.CopyFrom(obs)
    for frame in whole.frames:
        if frame.camera in pixels:
            frame.data = pixels[frame.camera].tobytes()
    sent = link_codec.observation_message_bytes(obs, pixels)
    assert pb.AgentMessage.FromString(sent) == pb.AgentMessage(observation=whole)
    assert [f.camera for f in pb.AgentMessage.FromString(sent).observation.frames] == [
        "front",
        "side",
        "wrist",
    ]


def test_a_probe_put_together_from_parts_parses_as_the_probe_it_names():
    for padding in (0, 1, 300, link_codec.MAX_PROBE_BYTES):
        message = pb.AgentMessage.FromString(link_codec.probe_message_bytes(41, padding))
        assert message.WhichOneof("body") == "probe"
        assert message.probe.id == 41 and message.probe.padding == bytes(padding)
    with pytest.raises(ValueError, match="probe padding"):
        link_codec.probe_message_bytes(1, link_codec.MAX_PROBE_BYTES + 1)
