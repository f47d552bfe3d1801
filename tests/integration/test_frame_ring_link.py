"""Raw frames from an agent on the trainer's host go by shared memory, arrive bit-exact, and are
spooled and recorded as ordinary raw frames; a trainer that does not map the ring gets them in-band."""

from __future__ import annotations

import time

import numpy as np
import pytest

from protos import link_codec
from protos import robot_link_pb2 as pb
from tests.integration.link_harness import (
    answer_episode,
    constant_policy,
    start_agent,
    start_server,
    wait_until,
)
from trainer.server.episode_runner import run_episode

pytestmark = pytest.mark.slow


def written_frames(agent) -> dict[int, dict[str, np.ndarray]]:
    """Record what the agent puts in its ring, by observation seq."""
    ring = agent.agent.control._encoder.ring
    cameras, write, frames = agent.agent.control._encoder._ring_cameras, ring.write, {}

    def recording_write(seq, images):
        frames[seq] = {name: np.array(image) for name, image in zip(cameras, images)}
        return write(seq, images)

    ring.write = recording_write
    return frames


def sent_in_band(agent) -> dict[int, dict[str, np.ndarray]]:
    """Record the pixels of the raw frames the agent sends in-band, by observation seq."""
    encoder = agent.agent.control._encoder
    encode, pixels_by_seq = encoder.encode, {}

    def recording_encode(images, capture_ns, seq=0):
        frames, pixels = encode(images, capture_ns, seq)
        pixels_by_seq[seq] = {name: np.array(image) for name, image in pixels.items()}
        return frames, pixels

    encoder.encode = recording_encode
    return pixels_by_seq


@pytest.mark.parametrize("trainer_maps_the_ring", [True, False])
def test_raw_frames_to_a_same_host_trainer_go_by_shared_memory_bit_exact(tmp_path, trainer_maps_the_ring):
    server = start_server(frame_ring=trainer_maps_the_ring)
    agent = start_agent(server.server.port, tmp_path / "spool", codec="raw")
    sent, in_band = written_frames(agent), sent_in_band(agent)
    try:
        session = server.call(server.server.wait_for_robot(timeout=30))
        end = server.call(run_episode(session, constant_policy([0.2, 0, 0, 0, 0, 0, 1])), timeout=60)
        assert end.kind == pb.EpisodeEvent.ENDED
        wait_until(lambda: len(server.server.sink.episodes) == 1, what="the stored episode")
        assert agent.agent.control._encoder.ring_active is trainer_maps_the_ring
        assert (session.frame_ring is not None) is trainer_maps_the_ring or session.state == "disconnected"
        episode = server.server.sink.episodes[0]
        assert len(episode.observations) == session.spec.max_episode_steps + 1
        for obs in episode.observations:
            assert all(f.codec == pb.CODEC_RAW_RGB8 for f in obs.frames)  # recorded as ordinary raw frames
            images = link_codec.decode_images(obs.frames, session.spec)
            if trainer_maps_the_ring:
                for name, image in images.items():
                    np.testing.assert_array_equal(image, sent[obs.seq][name])
            else:
                assert not sent  # nothing went through the ring: in-band, put together from the pixels
                for name, image in images.items():
                    np.testing.assert_array_equal(image, in_band[obs.seq][name])
        assert session.stats.ring_overruns == 0
    finally:
        agent.stop()
        server.stop()


@pytest.mark.parametrize("by_ring", [True, False])
def test_raw_frames_sent_by_the_ring_or_in_band_are_in_the_spool_with_their_pixels(tmp_path, by_ring):
    """Raw frames are spooled after they are sent (off the round trip), pixels and all."""
    server = start_server()
    agent = start_agent(
        server.server.port, tmp_path / "spool", codec="raw", frame_ring_slots=16 if by_ring else 0
    )
    sent = written_frames(agent) if by_ring else sent_in_band(agent)
    try:
        session = server.call(server.server.wait_for_robot(timeout=30))

        async def a_few_steps():
            from trainer.server.episode_runner import LiveEpisode

            episode = LiveEpisode(session, 10.0)
            await episode.start(0)
            for _ in range(5):
                await episode.play(np.array([[0.2, 0, 0, 0, 0, 0, 1]], np.float32))
            return episode.episode_id

        episode_id = server.call(a_few_steps(), timeout=60)
        server.stop(grace=None)  # the trainer dies mid-episode: nothing is acknowledged
        wait_until(lambda: episode_id in agent.agent.spool.pending(), what="the aborted episode in the spool")
        spooled = list(agent.agent.spool.observations(episode_id))
        recorded = [
            obs for obs in spooled if obs.seq in sent
        ]  # (the step observed as the link fell is in-band)
        assert len(recorded) >= 6
        for obs in spooled:
            assert all(f.codec == pb.CODEC_RAW_RGB8 for f in obs.frames)
        for obs in recorded:
            for name, image in link_codec.decode_images(obs.frames, session.spec).items():
                np.testing.assert_array_equal(image, sent[obs.seq][name])
    finally:
        agent.stop()


@pytest.mark.parametrize("by_ring", [True, False])
def test_raw_frames_are_spooled_only_after_the_trainer_has_answered_them(tmp_path, by_ring):
    """With chunks of several actions a tick's action is queued before its observation is even sent;
    its raw frames still reach the spool only once the trainer's answer to them has come back, so
    the megabyte written to disk never competes with the send for the CPU and the GIL. (An answer
    later than the tick's wait is not waited for longer: under load the spool goes ahead.)"""
    server = start_server()
    agent = start_agent(
        server.server.port, tmp_path / "spool", codec="raw", frame_ring_slots=16 if by_ring else 0
    )
    control = agent.agent.control
    answered_at: dict[int, float] = {}
    spooled_at: dict[int, float] = {}
    waited_in_time: dict[int, bool] = {}
    accept, append, wait = control.accept_chunk, control.spool.append_with_pixels, control.queue.wait_answered

    def timed_accept(msg):
        answered_at.setdefault(msg.obs_seq, time.monotonic())
        return accept(msg)

    def timed_append(episode_id, observation, images):
        spooled_at[observation.seq] = time.monotonic()
        return append(episode_id, observation, images)

    def recorded_wait(obs_seq, timeout_s):
        waited_in_time[obs_seq] = wait(obs_seq, timeout_s)
        return waited_in_time[obs_seq]

    control.accept_chunk, control.spool.append_with_pixels = timed_accept, timed_append
    control.queue.wait_answered = recorded_wait
    try:
        session = server.call(server.server.wait_for_robot(timeout=30))

        def slow_chunk(step, obs):
            time.sleep(0.01)  # the trainer thinks for 10 ms; its chunk covers the next 8 ticks
            return np.tile(np.array([0.1, 0, 0, 0, 0, 0, 1], np.float32), (8, 1))

        answered = server.call(answer_episode(session, 10, slow_chunk), timeout=60)
        wait_until(lambda: all(o.seq in spooled_at for o in answered[:-1]), what="the answered steps spooled")
        both = [o.seq for o in answered[:-1] if o.seq in answered_at]
        assert len(both) >= 8
        assert all(seq in waited_in_time for seq in both)  # every one waited for its answer ...
        in_time = [seq for seq in both if waited_in_time[seq]]
        assert len(in_time) >= 5, waited_in_time
        for seq in in_time:  # ... and, where it came within the tick, was spooled after it
            assert spooled_at[seq] >= answered_at[seq], f"seq {seq} spooled before its answer came back"
    finally:
        agent.stop()
        server.stop()
