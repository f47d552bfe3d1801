"""Ctrl-C and SIGTERM stop a run the same way: a checkpoint is saved, and the exit code says which."""

from __future__ import annotations

import contextlib
import signal


class Stopped(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: the run checkpoints as on Ctrl-C; the exit code says which signal."""

    def __init__(self, signal_number: int) -> None:
        super().__init__(signal_number)
        self.signal = signal_number


@contextlib.contextmanager
def stop_signals_interrupt():
    """SIGINT and SIGTERM raise :class:`Stopped` in the main thread (a KeyboardInterrupt, so the
    runner's checkpoint-on-interrupt path runs for both), then the old handlers come back."""

    def raise_stopped(number, _frame):
        raise Stopped(number)

    previous = {number: signal.signal(number, raise_stopped) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """128 + the signal that stopped the run (SIGINT for a plain KeyboardInterrupt)."""
    return 128 + getattr(interrupt, "signal", signal.SIGINT)
