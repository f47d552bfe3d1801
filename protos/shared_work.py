"""A few calls run at once on a thread pool, with the calling thread doing its share.

Waking a pool thread costs 0.2-0.5 ms on a small machine, about as much as encoding or decoding one
640x480 JPEG; so the pool takes every call but the last, which the caller runs meanwhile. Used for a
frame per camera on the agent (encode) and on the trainer (decode).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import TypeVar

T = TypeVar("T")


def map_sharing(pool: Executor, fn: Callable[..., T], calls: Iterable[tuple]) -> list[T]:
    """``[fn(*args) for args in calls]``, in order: all but the last on ``pool``, the last here."""
    calls = list(calls)
    if not calls:
        return []
    futures = [pool.submit(fn, *args) for args in calls[:-1]]
    last = fn(*calls[-1])
    return [future.result() for future in futures] + [last]
