"""The episode spool keeps every written step across crashes until the trainer acknowledges it."""

import pytest

from protos import robot_link_pb2 as pb
from robot_agent.spool import EpisodeSpool


def obs(step: int, payload: bytes = b"") -> pb.Observation:
    frame = pb.Frame(camera="front", codec=pb.CODEC_JPEG, height=1, width=1, data=payload)
    return pb.Observation(seq=step, episode_id="ep-1", step=step, frames=[frame])


def end(num_steps: int) -> pb.EpisodeEvent:
    return pb.EpisodeEvent(kind=pb.EpisodeEvent.ENDED, episode_id="ep-1", num_steps=num_steps)


def test_finished_episode_is_pending_until_acknowledged(tmp_path):
    spool = EpisodeSpool(tmp_path)
    spool.begin("ep-1")
    for step in range(4):
        spool.append("ep-1", obs(step))
    assert spool.pending() == []  # still running
    spool.finish("ep-1", end(3))
    assert spool.pending() == ["ep-1"]
    assert [o.step for o in spool.observations("ep-1")] == [0, 1, 2, 3]
    assert spool.acknowledge("ep-1") is True
    assert spool.pending() == [] and not (tmp_path / "ep-1").exists()
    assert spool.acknowledge("ep-1") is False  # a duplicate ack is harmless


def test_an_episode_acknowledged_while_pending_lists_the_spool_is_left_out(tmp_path, monkeypatch):
    """The link's thread deletes an acknowledged episode whenever its ack arrives, also between
    ``pending``'s listing of the spool and its look at each episode (a crash in CI once)."""
    spool = EpisodeSpool(tmp_path)
    for episode in ("ep-1", "ep-2"):
        spool.begin(episode)
        spool.append(episode, obs(0))
        spool.finish(episode, end(0))
    listed = list(tmp_path.glob("*/end.bin"))  # what pending's listing sees ...
    assert spool.acknowledge("ep-1") is True  # ... before the ack removes ep-1
    monkeypatch.setattr(type(tmp_path), "glob", lambda self, pattern: iter(listed))
    assert spool.pending() == ["ep-2"]


def test_a_crash_mid_episode_keeps_every_complete_step(tmp_path):
    spool = EpisodeSpool(tmp_path)
    spool.begin("ep-1")
    for step in range(3):
        spool.append("ep-1", obs(step, b"x" * 100))
    spool._open["ep-1"].write(b"\x40\x00\x00\x00partial")  # the process dies inside a write
    spool._open["ep-1"].flush()
    # A new agent process finds the interrupted episode and closes it as aborted.
    recovered = EpisodeSpool(tmp_path)
    assert recovered.recovered == ["ep-1"]
    assert recovered.pending() == ["ep-1"]
    event = recovered.end_event("ep-1")
    assert event.kind == pb.EpisodeEvent.ABORTED and event.num_steps == 2
    assert [o.step for o in recovered.observations("ep-1")] == [0, 1, 2]


def test_upload_parts_respect_the_size_limit_and_end_with_the_event(tmp_path):
    spool = EpisodeSpool(tmp_path)
    spool.begin("ep-1")
    for step in range(10):
        spool.append("ep-1", obs(step, b"y" * 1000))
    spool.finish("ep-1", end(9))
    parts = list(spool.upload_parts("ep-1", max_part_bytes=3500))
    assert len(parts) == 4
    assert all(p.ByteSize() < 4500 for p in parts)
    assert [p.last for p in parts] == [False, False, False, True]
    assert parts[-1].end.num_steps == 9
    assert [o.step for p in parts for o in p.observations] == list(range(10))


def test_unsafe_episode_ids_are_refused(tmp_path):
    spool = EpisodeSpool(tmp_path)
    with pytest.raises(ValueError, match="episode id"):
        spool.begin("../../etc")
    assert spool.acknowledge("../x") is False


def test_a_step_observed_again_keeps_its_newest_record(tmp_path):
    spool = EpisodeSpool(tmp_path)
    spool.begin("ep-1")
    for step, payload in [(0, b"a"), (1, b"old"), (1, b"new"), (2, b"b")]:
        spool.append("ep-1", obs(step, payload))
    spool._open["ep-1"].flush()
    recovered = EpisodeSpool(tmp_path)  # crash: the last observation (step 2) is on disk
    assert recovered.end_event("ep-1").num_steps == 2
    assert [(o.step, o.frames[0].data) for o in recovered.observations("ep-1")] == [
        (0, b"a"),
        (1, b"new"),
        (2, b"b"),
    ]


def test_pixels_written_straight_from_the_camera_make_the_same_record_as_a_raw_frame(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    images = {
        "front": rng.integers(0, 256, (48, 64, 3), np.uint8),
        "wrist": rng.integers(0, 256, (8, 8, 3), np.uint8),
    }
    sent = pb.Observation(  # what went to a same-host trainer: ring references, no pixels
        seq=7, episode_id="ep-1", step=2, state=[1.5, -2.0], instruction="lift",
        transition=pb.Transition(executed_action=[0.1] * 7, reward=0.5),
        frames=[pb.Frame(camera=name, codec=pb.CODEC_RING, height=im.shape[0], width=im.shape[1], ring_slot=3,
                         ring_offset=99, capture_mono_ns=42) for name, im in images.items()],
    )  # fmt: skip
    expected = pb.Observation()
    expected.CopyFrom(sent)
    for frame in expected.frames:  # the same observation with raw frames, built the slow way
        frame.codec, frame.data = pb.CODEC_RAW_RGB8, images[frame.camera].tobytes()
        frame.ClearField("ring_slot")
        frame.ClearField("ring_offset")
    spool = EpisodeSpool(tmp_path)
    spool.begin("ep-1")
    spool.append_with_pixels("ep-1", sent, images)
    spool.finish("ep-1", end(0))
    (stored,) = list(spool.observations("ep-1"))
    assert stored == expected
