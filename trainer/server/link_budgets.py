"""What one credential, one host and one session may cost the trainer: sessions, messages, bytes, log lines.

- :class:`SessionCounter` caps the calls open at once per credential (a token, a client certificate),
  per peer host and in all, counting calls that have not registered yet: 400 sessions on one token
  are refused past the cap, with ``RESOURCE_EXHAUSTED`` and a time to retry after.
- :class:`RateBudget` is a token bucket of messages and bytes per second for one session. A session
  over it is not read until it is back within budget: gRPC's flow control then holds the sender,
  and its messages cost the trainer's loop nothing meanwhile (nothing is parsed).
- :class:`LogBudget` bounds what one session (or the refusals of all unregistered peers) may write
  to the log: a burst, then a rate; what it drops is counted in the next line it writes.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class LinkLimits:
    """Caps and rates of the robot link. A lab of 16 robots on one token and behind one NAT stays far
    below the session caps; a robot's rates follow its own spec (``0`` below)."""

    max_sessions_per_credential: int = 64
    max_sessions_per_peer: int = 64  # per peer host (address without the port)
    max_sessions: int = 256
    register_timeout_s: float = 10.0  # from the call's start to its registration
    handshake_timeout_s: float = 5.0  # a connection that has not finished TLS / HTTP/2 by then is closed
    busy_retry_after_s: float = 5.0  # what a refusal over a session cap tells the agent to wait
    max_concurrent_streams: int = 16  # per connection (an agent uses one)
    messages_per_s: float = 0.0  # per session; 0: 4 x the robot's control_hz + 50
    bytes_per_s: float = 0.0  # per session; 0: 4 x its largest observation x its control_hz, >= 8 MB/s
    burst_s: float = 2.0  # a session may run this far ahead of its rates
    # Sessions refused or ended for a bad message, per credential and host: past this allowance the
    # next session from there waits before it is read (its client waits with it).
    bad_sessions_per_s: float = 5.0
    bad_bytes_per_s: float = 2.0 * 2**20
    log_lines_burst: int = 20
    log_lines_per_s: float = 0.2

    def session_rates(self, control_hz: float, observation_bytes: int) -> tuple[float, float]:
        """(messages/s, bytes/s) for a session of a robot with this rate and observation size."""
        messages = self.messages_per_s or 4.0 * control_hz + 50.0
        nbytes = self.bytes_per_s or max(4.0 * observation_bytes * control_hz, 8.0 * 2**20)
        return messages, nbytes


class SessionCounter:
    """Open calls per key; a call holds one count for each of its keys until it ends."""

    def __init__(self, limits: LinkLimits) -> None:
        self.limits = limits
        self.open: Counter[str] = Counter()

    def try_open(self, credential: str, peer_host: str) -> str | None:
        """Take a count for a new call, or say why it is over a cap (nothing is taken then)."""
        caps = (
            ("", self.limits.max_sessions, "sessions in all"),
            (
                f"credential:{credential}",
                self.limits.max_sessions_per_credential,
                "sessions on this credential",
            ),
            (f"peer:{peer_host}", self.limits.max_sessions_per_peer, f"sessions from {peer_host}"),
        )
        for key, cap, what in caps:
            if self.open[key] >= cap:
                return f"the trainer holds {self.open[key]} {what}, its cap (server.max_sessions*)"
        for key, _, _ in caps:
            self.open[key] += 1
        return None

    def close(self, credential: str, peer_host: str) -> None:
        for key in ("", f"credential:{credential}", f"peer:{peer_host}"):
            self.open[key] -= 1
            if self.open[key] <= 0:
                del self.open[key]


class RateBudget:
    """A token bucket of messages and bytes: :meth:`charge` says how long to wait before reading on."""

    def __init__(self, messages_per_s: float, bytes_per_s: float, burst_s: float) -> None:
        self.messages_per_s, self.bytes_per_s = messages_per_s, bytes_per_s
        self._burst = burst_s
        self._messages = messages_per_s * burst_s
        self._bytes = bytes_per_s * burst_s
        self._at = time.monotonic()
        self.throttled_s = 0.0  # how long this session was made to wait, in all

    def charge(self, nbytes: int) -> float:
        """Charge one message of ``nbytes``; the seconds until the session is within budget (0: now)."""
        now = time.monotonic()
        elapsed, self._at = now - self._at, now
        self._messages = (
            min(self._messages + elapsed * self.messages_per_s, self.messages_per_s * self._burst) - 1
        )
        self._bytes = min(self._bytes + elapsed * self.bytes_per_s, self.bytes_per_s * self._burst) - nbytes
        wait = max(-self._messages / self.messages_per_s, -self._bytes / self.bytes_per_s, 0.0)
        self.throttled_s += wait
        return wait


class Penalties:
    """Misbehaviour per (credential, host): a session refused or ended for a bad message charges one
    session and its bytes; once over the allowance, new sessions from there wait, unread."""

    def __init__(self, limits: LinkLimits) -> None:
        self.limits = limits
        self._buckets: dict[str, RateBudget] = {}
        self._not_before: dict[str, float] = {}

    def charge(self, key: str, nbytes: int) -> None:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) > 4096:  # hosts and credentials are few; forget the oldest
                oldest = next(iter(self._buckets))
                self._buckets.pop(oldest)
                self._not_before.pop(oldest, None)
            bucket = self._buckets[key] = RateBudget(
                self.limits.bad_sessions_per_s, self.limits.bad_bytes_per_s, self.limits.burst_s
            )
        wait = bucket.charge(nbytes)
        if wait > 0:
            self._not_before[key] = time.monotonic() + wait

    def delay_s(self, key: str) -> float:
        """How long a new session from ``key`` waits before it is read (0: at once)."""
        return max(self._not_before.get(key, 0.0) - time.monotonic(), 0.0)


class LogBudget:
    """At most ``burst`` lines, then ``per_s`` a second; dropped lines are counted in the next one."""

    def __init__(self, logger: logging.Logger, burst: int, per_s: float) -> None:
        self.logger, self.burst, self.per_s = logger, burst, per_s
        self._allowance = float(burst)
        self._at = time.monotonic()
        self.dropped = 0

    def log(self, level: int, message: str, *args) -> bool:
        now = time.monotonic()
        self._allowance = min(self._allowance + (now - self._at) * self.per_s, float(self.burst))
        self._at = now
        if self._allowance < 1.0:
            self.dropped += 1
            return False
        self._allowance -= 1.0
        if self.dropped:
            message += f" ({self.dropped} similar lines dropped)"
            self.dropped = 0
        self.logger.log(level, message, *args)
        return True

    def info(self, message: str, *args) -> bool:
        return self.log(logging.INFO, message, *args)

    def warning(self, message: str, *args) -> bool:
        return self.log(logging.WARNING, message, *args)


def clip_text(text: str, limit: int = 200) -> str:
    """Robot-sent text as a log shows it: quoted (control characters escaped), at most ``limit`` characters."""
    shown = repr(text[:limit])
    return shown + (f" (+{len(text) - limit} chars)" if len(text) > limit else "")
