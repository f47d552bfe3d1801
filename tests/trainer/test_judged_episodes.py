"""The hand-over of judged rewards from the env pool to the recorder (serve train mode)."""

from __future__ import annotations

import threading
import time

from trainer.server.judged_episodes import JudgedEpisodes


def test_the_recorder_waits_for_the_pool_to_close_an_episode_it_plays():
    judged = JudgedEpisodes("classifier", wait_s=10.0)
    judged.playing("arm")
    judged.record("arm", "ep1", 1, 0.0, False)
    taken = {}
    recorder = threading.Thread(target=lambda: taken.setdefault("steps", judged.take("arm", "ep1")))
    recorder.start()  # the link stored the episode before the pool judged its last step
    time.sleep(0.2)
    assert recorder.is_alive()  # still waiting: the pool has not closed it
    judged.record("arm", "ep1", 2, 1.0, True)
    judged.close("arm", "ep1")
    recorder.join(5)
    assert taken["steps"] == {1: (0.0, False), 2: (1.0, True)}


def test_episodes_the_pool_does_not_play_or_never_closes_keep_the_agents_values():
    judged = JudgedEpisodes("human", wait_s=0.3)
    assert judged.take("eval-arm", "ep1") is None  # not in the pool (a final evaluation): no wait
    judged.playing("arm")
    judged.record("arm", "ep2", 1, 1.0, True)
    tick = time.monotonic()
    assert judged.take("arm", "ep2") is None  # never closed: given up after wait_s
    assert time.monotonic() - tick >= 0.25  # it did wait for the pool
    judged.playing("arm", False)
    judged.record("arm", "ep3", 1, 1.0, True)
    assert judged.take("arm", "ep3") is None  # the robot left the pool: not waited for
