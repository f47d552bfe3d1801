"""Action chunks as they arrive from the trainer (on the link thread): checked, aged, queued or refused.

A chunk is refused, with an error to the trainer, when the e-stop is latched, when it is malformed
or outside the action limits, when it answers an observation never sent or too old to remember,
when that observation is older than the allowed action age, or when all of its ticks have passed.
A flood of refusals is reported once a second, not once per chunk.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.validation import ContractError
from robot_agent.action_queue import ActionQueue, StaleChunk
from robot_agent.log_limit import ReportLimiter
from robot_agent.safety import SafetyConfig, SafetyFilter
from robot_agent.tick_ledger import TickLedger

log = logging.getLogger(__name__)

SendError = Callable[[str, str], None]


class ChunkIntake:
    """Judges each chunk against the tick ledger and the safety limits; queues the good ones."""

    def __init__(
        self,
        safety: SafetyFilter,
        limits: SafetyConfig,
        queue: ActionQueue,
        ledger: TickLedger,
        stats,
        send_error: SendError,
    ) -> None:
        self.safety, self.limits, self.queue, self.ledger = safety, limits, queue, ledger
        self.stats = stats  # the loop's counters: chunks accepted / rejected, round trips
        self.send_error = send_error
        self.policy_version = 0  # of the newest accepted chunk: stamped on the transitions it drives
        self._rejections = ReportLimiter()

    def accept(self, msg: pb.ActionChunk, estopped: bool) -> str | None:
        """Queue ``msg`` if it is valid and fresh; returns the error sent to the trainer otherwise."""
        if estopped:
            return self._reject("estop", "e-stop is latched; restart the agent to release it")
        try:
            chunk = self.safety.check_chunk(link_codec.chunk_from_proto(msg))
        except (ContractError, link_codec.LinkCodecError) as exc:
            return self._reject("bad_action", str(exc))
        answered = self.ledger.lookup(msg.obs_seq)
        if msg.obs_seq > answered.newest_sent:
            return self._reject(
                "bad_action",
                f"chunk answers seq {msg.obs_seq}, but the newest sent is {answered.newest_sent}",
            )
        # A late answer still labels a tick the human drove, even when it is too old to execute.
        labelled = self.ledger.fill_late_policy_action(chunk, msg.obs_seq, msg.policy_version)
        if answered.sent_mono_ns is None:
            if labelled:
                return None
            return self._reject("stale_action", f"chunk answers seq {msg.obs_seq}, too old to remember")
        max_age_ms = self.limits.max_action_age_ms
        if msg.max_age_ms:
            max_age_ms = min(max_age_ms, msg.max_age_ms)
        age_ms = (time.monotonic_ns() - answered.sent_mono_ns) / 1e6
        if age_ms > max_age_ms:
            self.stats.round_trip_ms.append(age_ms)  # a late answer is a round trip too
            if labelled:
                return None
            return self._reject(
                "stale_action", f"chunk answers an observation {age_ms:.0f} ms old (max {max_age_ms:g})"
            )
        try:
            self.queue.accept(chunk, msg.obs_seq, answered.next_tick)
        except StaleChunk as exc:
            self.stats.round_trip_ms.append(age_ms)  # answered, but after its ticks
            return None if labelled else self._reject("stale_action", str(exc))
        self.policy_version = msg.policy_version  # the queue now plays this chunk (or blends into it)
        self.stats.chunks_accepted += 1
        self.stats.round_trip_ms.append(age_ms)
        return None

    def _reject(self, code: str, message: str) -> str:
        self.stats.chunks_rejected += 1
        held = self._rejections.allow(code)
        if held is not None:
            more = f" (and {held} more since the last report)" if held else ""
            log.warning("rejected action chunk (%s): %s%s", code, message, more)
            self.send_error(code, message + more)
        return message
