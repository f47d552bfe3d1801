"""map_sharing: results in call order, the last call on the calling thread, the others on the pool."""

import threading
from concurrent.futures import ThreadPoolExecutor

from protos.shared_work import map_sharing


def test_results_come_in_order_and_the_caller_runs_the_last_call():
    def where(index: int) -> tuple[int, str]:
        return index, threading.current_thread().name

    with ThreadPoolExecutor(2, thread_name_prefix="pool") as pool:
        results = map_sharing(pool, where, [(i,) for i in range(4)])
        assert [i for i, _ in results] == [0, 1, 2, 3]
        assert all(name.startswith("pool") for _, name in results[:-1])
        assert results[-1][1] == threading.current_thread().name
        assert map_sharing(pool, where, []) == []
