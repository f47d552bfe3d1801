"""Action chunks are played out by tick; stale and out-of-order chunks never run."""

import itertools
import threading
import time

import numpy as np
import pytest

from robot_agent.action_queue import ActionQueue, StaleChunk


def chunk(values) -> np.ndarray:
    return np.asarray(values, np.float32)[:, None]


def test_chunk_actions_map_to_consecutive_ticks():
    queue = ActionQueue()
    queue.accept(chunk([1, 2, 3]), obs_seq=10, next_tick=10)
    assert [float(queue.wait_for(t, 0)[0]) for t in (10, 11, 12)] == [1, 2, 3]
    assert queue.wait_for(13, 0) is None


def test_actions_for_past_ticks_are_dropped_not_replayed_late():
    queue = ActionQueue()
    accepted = queue.accept(chunk([1, 2, 3, 4]), obs_seq=10, next_tick=12)
    assert accepted.dropped == 2 and accepted.first_tick == 12
    assert float(queue.wait_for(12, 0)[0]) == 3


def test_a_chunk_entirely_in_the_past_is_stale():
    queue = ActionQueue()
    with pytest.raises(StaleChunk, match="all for ticks before"):
        queue.accept(chunk([1, 2]), obs_seq=5, next_tick=7)


def test_an_older_chunk_after_a_newer_one_is_stale():
    queue = ActionQueue()
    queue.accept(chunk([1, 1, 1, 1]), obs_seq=8, next_tick=8)
    with pytest.raises(StaleChunk, match="older than an accepted chunk"):
        queue.accept(chunk([9, 9, 9, 9]), obs_seq=7, next_tick=8)
    assert float(queue.wait_for(8, 0)[0]) == 1


def test_replace_supersedes_the_rest_of_the_old_chunk():
    queue = ActionQueue("replace")
    queue.accept(chunk([1, 1, 1, 1, 1]), obs_seq=0, next_tick=0)
    queue.wait_for(0, 0)
    queue.accept(chunk([5, 5]), obs_seq=1, next_tick=1)
    assert [float(queue.wait_for(t, 0)[0]) for t in (1, 2)] == [5, 5]
    assert queue.wait_for(3, 0) is None  # the old chunk's tail is gone


def test_blend_cross_fades_into_the_new_chunk():
    queue = ActionQueue("blend")
    queue.accept(chunk([0, 0, 0, 0]), obs_seq=0, next_tick=0)
    queue.accept(chunk([3, 3, 3, 3, 3]), obs_seq=0, next_tick=0)
    values = [float(queue.wait_for(t, 0)[0]) for t in range(5)]
    assert values == pytest.approx([0.6, 1.2, 1.8, 2.4, 3.0])  # overlap of 4: weights 1/5 .. 4/5, then new
    assert all(b >= a for a, b in itertools.pairwise(values))


def test_wait_for_wakes_when_a_chunk_arrives():
    queue = ActionQueue()
    threading.Timer(0.05, lambda: queue.accept(chunk([7]), obs_seq=3, next_tick=3)).start()
    start = time.monotonic()
    action = queue.wait_for(3, 2.0)
    assert action is not None and float(action[0]) == 7
    assert time.monotonic() - start < 1.0


def test_wait_answered_returns_when_a_chunk_answers_that_observation_or_a_later_one():
    queue = ActionQueue()
    assert queue.wait_answered(5, 0.01) is False  # nothing answered yet: times out
    threading.Timer(0.05, lambda: queue.accept(chunk([1, 2]), obs_seq=6, next_tick=6)).start()
    start = time.monotonic()
    assert queue.wait_answered(5, 5.0) is True  # seq 6 answers after 5: 5 is behind it
    assert time.monotonic() - start < 2.0
    assert queue.wait_answered(6, 0) is True and queue.wait_answered(7, 0) is False


def test_wait_answered_ends_at_once_when_the_queue_is_cleared():
    queue = ActionQueue()
    threading.Timer(0.05, queue.clear).start()
    start = time.monotonic()
    assert queue.wait_answered(3, 10.0) is False
    assert time.monotonic() - start < 5.0


def test_unknown_merge_mode_is_named():
    with pytest.raises(ValueError, match="merge"):
        ActionQueue("average")


def test_a_flood_of_reports_is_let_through_once_per_interval_with_the_count_held_back():
    from robot_agent.log_limit import ReportLimiter

    now = [0.0]
    limiter = ReportLimiter(1.0, burst=5, clock=lambda: now[0])
    assert [limiter.allow("bad_action") for _ in range(5)] == [0] * 5
    assert [limiter.allow("bad_action") for _ in range(999)] == [None] * 999
    assert limiter.allow("stale_action") == 0  # keys are limited separately
    now[0] = 1.0
    assert limiter.allow("bad_action") == 999
