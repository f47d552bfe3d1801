"""Episode stores run niced, so an episode's end does not take the CPU from live robots' ticks."""

from __future__ import annotations

import os
import threading

from trainer.server.episodes import MemoryEpisodeSink
from trainer.server.link_server import STORE_NICE, LinkServer, LinkServerConfig


def nice_of_this_thread() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def nice_of_a_thread_started_here() -> int:
    """What a thread the store starts (an mp4 encoder's) runs at."""
    seen = []
    thread = threading.Thread(target=lambda: seen.append(nice_of_this_thread()))
    thread.start()
    thread.join()
    return seen[0]


def test_episode_stores_and_the_threads_they_start_run_below_the_serving_threads():
    server = LinkServer(LinkServerConfig(host="127.0.0.1", port=0), sink=MemoryEpisodeSink())
    try:
        serving = nice_of_this_thread()
        assert serving < STORE_NICE
        assert server.store_executor.submit(nice_of_this_thread).result() >= STORE_NICE
        assert server.store_executor.submit(nice_of_a_thread_started_here).result() >= STORE_NICE
        assert nice_of_this_thread() == serving  # the serving thread keeps its own
    finally:
        server.store_executor.shutdown()
