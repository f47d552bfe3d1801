"""Rate limits for repeated reports: a flood of bad messages costs a few lines a second, not one each."""

from __future__ import annotations

import time
from collections.abc import Callable


class ReportLimiter:
    """Lets ``burst`` reports per key through in every ``interval_s``; counts the ones it holds back."""

    def __init__(
        self, interval_s: float = 1.0, burst: int = 5, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s, self.burst, self._clock = interval_s, burst, clock
        self._window: dict[str, tuple[float, int]] = {}  # key -> (window start, reports let through)
        self._held: dict[str, int] = {}

    def allow(self, key: str) -> int | None:
        """None to stay quiet; else the number of reports of ``key`` held back since the last one."""
        now = self._clock()
        start, sent = self._window.get(key, (now, 0))
        if now - start >= self.interval_s:
            start, sent = now, 0
        if sent >= self.burst:
            self._held[key] = self._held.get(key, 0) + 1
            return None
        self._window[key] = (start, sent + 1)
        return self._held.pop(key, 0)
