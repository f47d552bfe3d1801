"""The watchdog: the robot holds when no valid action arrived within the deadline."""

from __future__ import annotations

import time


class Watchdog:
    """Tracks the last valid action; ``expired()`` once ``deadline_s`` passed without one."""

    def __init__(self, deadline_s: float, clock=time.monotonic) -> None:
        if deadline_s <= 0:
            raise ValueError(f"watchdog deadline must be > 0, got {deadline_s}")
        self.deadline_s = deadline_s
        self._clock = clock
        self._last_fed = clock()

    def feed(self) -> None:
        self._last_fed = self._clock()

    def deadline(self) -> float:
        """The monotonic time at which the watchdog trips unless fed."""
        return self._last_fed + self.deadline_s

    def expired(self) -> bool:
        return self._clock() >= self.deadline()
