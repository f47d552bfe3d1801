"""Raw frames by shared memory: bit-exact, overruns reported (never misread), only same-host rings."""

from __future__ import annotations

import numpy as np
import pytest

from protos import robot_link_pb2 as pb
from protos.frame_ring import (
    FrameRingError,
    FrameRingReader,
    FrameRingWriter,
    materialize,
    peer_is_local,
)

SHAPES = [(480, 640, 3), (37, 53, 3), (8, 8, 3)]


@pytest.fixture
def ring():
    writer = FrameRingWriter(SHAPES, slots=4)
    reader = FrameRingReader(str(writer.path), writer.slots, writer.slot_bytes)
    yield writer, reader
    reader.close()
    writer.close()
    assert not writer.path.exists()  # the agent removes its ring


def images(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, shape, dtype=np.uint8) for shape in SHAPES]


def ring_observation(writer: FrameRingWriter, seq: int, frames: list[np.ndarray]) -> pb.Observation:
    slot, offsets = writer.write(seq, frames)
    return pb.Observation(
        seq=seq,
        state=[0.5, -1.0],
        frames=[
            pb.Frame(camera=f"cam{i}", codec=pb.CODEC_RING, height=f.shape[0], width=f.shape[1],
                     ring_slot=slot, ring_offset=offset, capture_mono_ns=1000 + i)
            for i, (f, offset) in enumerate(zip(frames, offsets))
        ],
    )  # fmt: skip


def test_frames_come_out_of_the_ring_bit_exact_at_every_size(ring):
    writer, reader = ring
    for seq in range(10):  # more than the slots: the ring wraps
        sent = images(seq)
        received = materialize(ring_observation(writer, seq, sent), reader)
        assert received is not None and received.seq == seq and list(received.state) == [0.5, -1.0]
        for i, (frame, image) in enumerate(zip(received.frames, sent)):
            assert frame.codec == pb.CODEC_RAW_RGB8 and frame.capture_mono_ns == 1000 + i
            assert frame.ring_slot == 0 and frame.ring_offset == 0
            np.testing.assert_array_equal(np.frombuffer(frame.data, np.uint8).reshape(image.shape), image)


def test_a_slot_reused_before_the_trainer_copied_it_is_reported_not_misread(ring):
    writer, reader = ring
    late = ring_observation(writer, 0, images(0))
    for seq in range(1, writer.slots + 1):  # the agent goes round the ring: slot 0 now holds seq 4
        writer.write(seq, images(seq))
    assert materialize(late, reader) is None
    assert reader.view(0, 0, 8, 10) is None and not reader.holds(0, 0)


def test_in_band_observations_pass_through_and_stray_ring_frames_are_refused(ring):
    writer, reader = ring
    in_band = pb.Observation(seq=3, frames=[pb.Frame(camera="c", codec=pb.CODEC_RAW_RGB8, height=1, width=1,
                                                     data=b"abc")])  # fmt: skip
    assert materialize(in_band, None) is in_band
    with pytest.raises(FrameRingError, match="no frame ring was accepted"):
        materialize(ring_observation(writer, 1, images(1)), None)
    bad = ring_observation(writer, 2, images(2))
    bad.frames[0].ring_offset = writer.slot_bytes  # past the slot: never read outside the ring
    with pytest.raises(FrameRingError, match="outside the ring"):
        materialize(bad, reader)


def test_only_a_ring_of_ours_with_the_offered_size_is_mapped(tmp_path, ring):
    writer, _ = ring
    stranger = tmp_path / "rlinf-ring-1-0123456789abcdef"
    stranger.write_bytes(b"x" * 64)
    with pytest.raises(FrameRingError, match="not a frame ring"):
        FrameRingReader(str(stranger), 2, 32)
    with pytest.raises(FrameRingError, match="not a frame ring"):
        FrameRingReader("/dev/shm/../etc/passwd", 2, 32)
    with pytest.raises(FrameRingError, match="holds"):
        FrameRingReader(str(writer.path), writer.slots, writer.slot_bytes + 1)
    with pytest.raises(FrameRingError, match="cannot open"):
        FrameRingReader("/dev/shm/rlinf-ring-1-ffffffffffffffff", 2, 32)  # not on this host


@pytest.mark.parametrize(
    ("peer", "local"),
    [("ipv4:127.0.0.1:5000", True), ("ipv6:[::1]:5000", True), ("unix:/tmp/s", True),
     ("ipv4:10.0.0.7:5000", False), ("ipv6:[2001:db8::1]:5000", False), ("garbage", False)],
)  # fmt: skip
def test_a_ring_is_mapped_only_for_a_peer_on_this_host(peer, local):
    assert peer_is_local(peer) is local


@pytest.mark.parametrize(
    ("server", "offered"),
    [("127.0.0.1:50051", True), ("localhost:50051", True), ("[::1]:50051", True),
     ("trainer.lab:50051", False), ("10.0.0.7:50051", False)],
)  # fmt: skip
def test_the_agent_offers_a_ring_only_for_raw_or_auto_frames_to_this_host(server, offered):
    from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
    from robot_agent.codec_choice import ChoiceRule, CodecSelector
    from robot_agent.frame_encoder import FrameEncoder

    spec = EnvSpec(
        "arm", (CameraSpec("front", 8, 8, 10.0),), (StateField("s", 1),), ee_delta_action_space(), 10.0, "", 5
    )
    for codec in ("raw", "jpeg", "auto"):
        encoder = FrameEncoder(1, CodecSelector(codec, ["front"], 90, 50, ChoiceRule(100.0)))
        encoder.offer_ring(spec, server, slots=4)
        try:
            assert (encoder.ring_proto() is not None) is (offered and codec != "jpeg")
        finally:
            encoder.close()


def test_rings_left_by_dead_agents_are_removed_when_a_new_one_starts(tmp_path):
    import os
    import subprocess
    import sys

    from protos.frame_ring import remove_stale_rings

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = tmp_path / f"rlinf-ring-{int(dead.stdout)}-0123456789abcdef"  # its agent crashed
    live = tmp_path / f"rlinf-ring-{os.getpid()}-fedcba9876543210"  # an agent still running
    other = tmp_path / "unrelated-file"
    for path in (stale, live, other):
        path.write_bytes(b"x")
    assert remove_stale_rings(str(tmp_path)) == [stale]
    assert not stale.exists() and live.exists() and other.exists()
