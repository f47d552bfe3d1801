"""Action chunks from the trainer, queued by control tick and played out one action per tick.

A chunk answering observation ``s`` holds the actions for ticks ``s, s + 1, ...``. Actions for ticks
that already passed are dropped (the trainer's latency is absorbed, never replayed late). A new chunk
either replaces the rest of the old one or cross-fades into it, so inference can overlap execution.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

MERGE_MODES = ("replace", "blend")


class StaleChunk(ValueError):
    """A chunk that must not be executed: out of order, too old, or entirely in the past."""


@dataclass(frozen=True)
class AcceptedChunk:
    first_tick: int  # the first tick the chunk's actions now cover
    dropped: int  # leading actions dropped because their ticks had passed


class ActionQueue:
    """Thread-safe: the link thread ``accept``s chunks, the control loop ``wait_for``s tick actions."""

    def __init__(self, merge: str = "replace") -> None:
        if merge not in MERGE_MODES:
            raise ValueError(f"chunk merge must be one of {MERGE_MODES}, got {merge!r}")
        self.merge = merge
        self._cond = threading.Condition()
        self._first_tick = 0
        self._actions = np.zeros((0, 0), dtype=np.float32)
        self._last_obs_seq = -1
        self._clears = 0

    def accept(self, chunk: np.ndarray, obs_seq: int, next_tick: int) -> AcceptedChunk:
        """Queue ``chunk`` (answering ``obs_seq``); ``next_tick`` is the next tick not yet executed."""
        with self._cond:
            if obs_seq < self._last_obs_seq:
                raise StaleChunk(
                    f"chunk answers seq {obs_seq}, older than an accepted chunk ({self._last_obs_seq})"
                )
            dropped = max(0, next_tick - obs_seq)
            if dropped >= len(chunk):
                raise StaleChunk(
                    f"chunk answering seq {obs_seq} has {len(chunk)} actions, all for ticks before {next_tick}"
                )
            new = chunk[dropped:]
            start = obs_seq + dropped
            self._drop_before(start)
            old = self._actions if self._first_tick == start else self._actions[:0]
            overlap = min(len(old), len(new))
            if self.merge == "blend" and overlap:
                # Cross-fade from the old plan to the new one over the ticks both cover.
                weights = (np.arange(1, overlap + 1, dtype=np.float32) / (overlap + 1))[:, None]
                new = new.copy()
                new[:overlap] = (1 - weights) * old[:overlap] + weights * new[:overlap]
            # Whatever the old chunk planned after ``start`` is superseded by the new one.
            self._actions, self._first_tick = new, start
            self._last_obs_seq = obs_seq
            self._cond.notify_all()
            return AcceptedChunk(first_tick=start, dropped=dropped)

    def wait_for(self, tick: int, timeout_s: float) -> np.ndarray | None:
        """The action for ``tick``, waiting up to ``timeout_s`` for a chunk that covers it.

        A :meth:`clear` (the link dropped, the robot holds) ends the wait at once with None."""
        with self._cond:
            cleared = self._clears
            self._cond.wait_for(
                lambda: self._covers(tick) or self._clears != cleared, timeout=max(0.0, timeout_s)
            )
            if not self._covers(tick):
                self._drop_before(tick + 1)
                return None
            action = self._actions[tick - self._first_tick].copy()
            self._drop_before(tick + 1)
            return action

    def wait_answered(self, obs_seq: int, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a chunk answering ``obs_seq`` (or a later observation) to be
        accepted; False on timeout or on a :meth:`clear` (the link dropped)."""
        with self._cond:
            cleared = self._clears
            self._cond.wait_for(
                lambda: self._last_obs_seq >= obs_seq or self._clears != cleared, timeout=max(0.0, timeout_s)
            )
            return self._last_obs_seq >= obs_seq

    def clear(self) -> None:
        with self._cond:
            self._actions = self._actions[:0]
            self._clears += 1
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._actions)

    def _covers(self, tick: int) -> bool:
        return self._first_tick <= tick < self._first_tick + len(self._actions)

    def _drop_before(self, tick: int) -> None:
        if tick > self._first_tick:
            self._actions = self._actions[tick - self._first_tick :]
            self._first_tick = tick
