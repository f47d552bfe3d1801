"""The tick counter the control loop advances and the link thread reads, and what each tick sent.

An action chunk answers an observation by its ``seq`` (the tick that sent it). To judge a chunk the
link thread needs the tick being run, when that observation left (its age) and the newest one sent;
to record what the policy said on a tick a human drove, the transition still waiting for that answer.
Every read and write goes through one lock, so the two threads never see half an update.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

import numpy as np

from protos import robot_link_pb2 as pb

REMEMBERED_TICKS = 256  # older observations are "too old to remember": their answers are refused


@dataclass(frozen=True)
class Answered:
    """What the ledger knows about the observation a chunk answers."""

    sent_mono_ns: int | None  # when it left; None when unknown (never sent, or forgotten)
    newest_sent: int  # the newest seq sent (-1 before any)
    next_tick: int  # the tick being run: actions for earlier ticks are past


class TickLedger:
    """Thread-safe: the control loop ``advance``s and records ``sent``; the link thread ``lookup``s."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tick = 0
        self._sent_mono: collections.OrderedDict[int, int] = collections.OrderedDict()
        # (tick, its transition): a tick the human drove before the policy's answer came. The answer
        # is still recorded if it arrives before the transition is sent with the next observation.
        self._awaiting_policy: tuple[int, pb.Transition] | None = None

    @property
    def tick(self) -> int:
        with self._lock:
            return self._tick

    def advance(self) -> None:
        with self._lock:
            self._tick += 1

    def sent(self, seq: int, mono_ns: int) -> None:
        with self._lock:
            self._sent_mono[seq] = mono_ns
            while len(self._sent_mono) > REMEMBERED_TICKS:
                self._sent_mono.popitem(last=False)

    def lookup(self, obs_seq: int) -> Answered:
        with self._lock:
            newest = next(reversed(self._sent_mono), -1) if self._sent_mono else -1
            return Answered(self._sent_mono.get(obs_seq), newest, self._tick)

    # -- the policy's answer to a tick a human drove ------------------------------------------------
    def await_policy(self, transition: pb.Transition) -> None:
        """The human drove this tick before the policy answered: record its answer if it comes in time."""
        with self._lock:
            self._awaiting_policy = (self._tick, transition)

    def stop_waiting(self) -> None:
        with self._lock:
            self._awaiting_policy = None

    def attach(self, observation: pb.Observation, transition: pb.Transition) -> None:
        """Copy ``transition`` into the outgoing observation; a later answer is no longer recorded."""
        with self._lock:
            self._awaiting_policy = None
            observation.transition.CopyFrom(transition)

    def fill_late_policy_action(self, chunk: np.ndarray, obs_seq: int, version: int) -> bool:
        """Fill in the policy's action of a tick the human already drove, if ``chunk`` covers it.

        What the policy would have done is a label (HG-DAgger compares it with the human's), so it
        must not depend on whether the answer beat the tick's execution budget.
        """
        with self._lock:
            if self._awaiting_policy is None:
                return False
            tick, transition = self._awaiting_policy
            if not obs_seq <= tick < obs_seq + len(chunk):
                return False
            transition.policy_action[:] = chunk[tick - obs_seq].tolist()
            transition.policy_version = version
            self._awaiting_policy = None
            return True
