"""``link.codec=auto``: each camera's encoding picked from what the link carries and what coding costs.

Three measurements feed the choice:

* **the link** (:class:`LinkMeter`): its base round trip and its rate in bytes/ms, from probe pairs
  (a small and a large ``LinkProbe`` that the trainer echoes at once), at connect and every few
  seconds while running. (Observations' own round trips were tried as rate samples: the control
  thread's hand-off to the link loop, a millisecond on a small PC, read as a slow link for small
  JPEG payloads, so a fast link looked like 200 Mb/s.)
* **each option's cost on each camera** (:func:`measure_costs`): bytes, encode and decode time,
  measured on the camera's real frames;
* **the control period**.

An assignment (an option per camera) is predicted to take ``base + coding time + bytes / rate``.
Among the assignments whose link time and coding time each stay under ``max_link_share`` of the
period (the control rate keeps its headroom), the one with the best fidelity (raw, then the top JPEG
quality, ...) is taken if it is within a slack of the fastest; where none fits (the rate is lost
whatever is sent), the one with the shortest round trip. A running choice moves up in fidelity after
a dwell time and with headroom, and down only when it no longer fits, or is slower than the best by a
clear margin (no flapping).
"""

from __future__ import annotations

import collections
import itertools
import logging
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from protos import link_codec
from protos.env_spec import LINK_DOWNSCALES, CameraSpec

log = logging.getLogger(__name__)
SWITCH_GAIN = 0.1  # a lower-fidelity choice replaces one this much slower than the slack allows...
SWITCH_MIN_MS = 0.5  # ... plus this
DWELL_S = 2.0  # a higher-fidelity choice replaces the running one no sooner than this after a switch
UP_HEADROOM = 0.8  # ... and only if its link time is within this share of what the period allows
LOWER_QUALITIES = (75, 50, 30)


@dataclass(frozen=True)
class CodecOption:
    """One way to send a camera's frames: raw RGB8, or JPEG at a quality, at 1/``downscale`` of each
    side (the trainer restores the declared size)."""

    codec: str  # "raw" | "jpeg"
    quality: int = 0
    downscale: int = 1

    @property
    def label(self) -> str:
        label = "raw" if self.codec == "raw" else f"jpeg q{self.quality}"
        return label if self.downscale == 1 else f"{label} 1/{self.downscale}"


def ladder(top_quality: int, min_quality: int, max_downscale: int = 1) -> tuple[CodecOption, ...]:
    """The options in order of fidelity: raw, then JPEG from ``top_quality`` down to ``min_quality``,
    then JPEG at ``min_quality`` at 1/2, 1/4, ... of each side down to 1/``max_downscale`` (the
    resolution goes only once the quality has: each step carries fewer bytes than the one before)."""
    qualities = [top_quality, *(q for q in LOWER_QUALITIES if min_quality <= q < top_quality)]
    if min_quality < qualities[-1]:
        qualities.append(min_quality)
    smaller = [CodecOption("jpeg", qualities[-1], k) for k in LINK_DOWNSCALES if 1 < k <= max_downscale]
    return (CodecOption("raw"), *(CodecOption("jpeg", q) for q in qualities), *smaller)


@dataclass(frozen=True)
class OptionCost:
    """What one option costs on one camera's frames."""

    bytes: int
    encode_ms: float
    decode_ms: float


def measure_costs(
    image: np.ndarray, options: tuple[CodecOption, ...], repeats: int = 2
) -> dict[CodecOption, OptionCost]:
    """Encode and decode ``image`` with every option; the best of ``repeats`` times each, after an
    untimed first round (a first call pays for memory touched the first time: once 1.4 ms for the
    0.1 ms copy of a raw frame, which read as a reason to send JPEG on a 10 Gb/s link)."""
    largest = max(option.downscale for option in options)
    spec = CameraSpec("probe", image.shape[0], image.shape[1], 30.0, largest)
    costs = {}
    for option in options:
        encode_ms, decode_ms = [], []
        for attempt in range(repeats + 1):
            start = time.perf_counter()
            frame = link_codec.encode_frame("probe", image, option.codec, option.quality, option.downscale)
            middle = time.perf_counter()
            link_codec.decode_frame(frame, spec)
            if attempt:
                encode_ms.append((middle - start) * 1e3)
                decode_ms.append((time.perf_counter() - middle) * 1e3)
        costs[option] = OptionCost(len(frame.data), min(encode_ms), min(decode_ms))
    return costs


@dataclass(frozen=True)
class LinkEstimate:
    """The link as measured: round trip of a tiny message, and bytes carried per ms."""

    base_ms: float
    bytes_per_ms: float

    @property
    def mbit_s(self) -> float:
        return self.bytes_per_ms * 8 / 1e3

    def transfer_ms(self, size: float) -> float:
        return size / self.bytes_per_ms


class LinkMeter:
    """Thread-safe: probe pairs in, the current :class:`LinkEstimate` out (medians of the last few)."""

    def __init__(self, window: int = 5) -> None:
        self._lock = threading.Lock()
        self._base_ms: collections.deque[float] = collections.deque(maxlen=window)
        self._rates: collections.deque[float] = collections.deque(maxlen=window)

    def add_probe(self, small_ms: float, large_ms: float, extra_bytes: int) -> None:
        """One pair: the round trips of a tiny probe and of one ``extra_bytes`` larger."""
        with self._lock:
            self._base_ms.append(small_ms)
            # A transfer below the timer's noise says only "at least this fast": count it as 0.05 ms.
            self._rates.append(extra_bytes / max(large_ms - small_ms, 0.05))

    def estimate(self) -> LinkEstimate | None:
        with self._lock:
            if not self._base_ms or not self._rates:
                return None
            # The base is a floor (a tiny message never takes less), so the least of the recent ones.
            return LinkEstimate(min(self._base_ms), statistics.median(self._rates))

    def probe_bytes(self, cap: int, target_ms: float = 4.0, floor: int = 32 * 1024) -> int:
        """Size of the next large probe: about ``target_ms`` of the link as measured so far (``floor``
        before any measurement), at most ``cap``."""
        estimate = self.estimate()
        size = floor if estimate is None else max(floor, estimate.bytes_per_ms * target_ms)
        return int(min(cap, size))


Costs = Mapping[str, Mapping[CodecOption, OptionCost]]


@dataclass(frozen=True)
class ChoiceRule:
    """What the choice may spend: the control period, the share of it the link may take, and how much
    slower than the fastest assignment a higher-fidelity one may be and still be preferred."""

    period_ms: float
    max_link_share: float = 0.5
    slack: float = 0.25  # relative ...
    slack_ms: float = 1.0  # ... plus absolute


@dataclass(frozen=True)
class Choice:
    """An option per camera, what it is predicted to take, and why it was picked."""

    options: dict[str, CodecOption]
    predicted_ms: float
    busy_ms: float  # per observation, the longer of the link's time and the coding's CPU time
    fits: bool  # busy_ms within the share of the period the link may take
    reason: str

    def labels(self) -> str:
        return ", ".join(f"{camera} {option.label}" for camera, option in sorted(self.options.items()))


def predict(options: Mapping[str, CodecOption], costs: Costs, link: LinkEstimate) -> tuple[float, float]:
    """(round trip, busy time) of one assignment, in ms. Coding is counted as CPU time (summed over
    cameras): on a small robot PC, and on a trainer decoding many robots, cores are not free. The busy
    time is the longer of the link's time and the coding's: either one bounds the rate (two JPEG
    encodes of 1.7 ms each keep no 1 kHz loop, however fast the link)."""
    chosen = [costs[camera][option] for camera, option in options.items()]
    link_ms = link.transfer_ms(sum(c.bytes for c in chosen))
    coding_ms = sum(c.encode_ms + c.decode_ms for c in chosen)
    return link.base_ms + coding_ms + link_ms, max(link_ms, coding_ms)


def fidelity_steps(options: Mapping[str, CodecOption], costs: Costs) -> int:
    """Steps down the ladder, summed over cameras (0: all raw)."""
    return sum(list(costs[camera]).index(option) for camera, option in options.items())


def candidates(costs: Costs, limit: int = 1024) -> list[dict[str, CodecOption]]:
    """Every assignment when there are few; with many cameras, every camera on the same step of its
    ladder (its last step where its ladder is shorter)."""
    cameras = sorted(costs)
    ladders = [list(costs[camera]) for camera in cameras]
    if np.prod([len(steps) for steps in ladders], dtype=float) > limit:
        longest = max(len(steps) for steps in ladders)
        return [
            {c: steps[min(i, len(steps) - 1)] for c, steps in zip(cameras, ladders)} for i in range(longest)
        ]
    return [dict(zip(cameras, combo)) for combo in itertools.product(*ladders)]


def choose(costs: Costs, link: LinkEstimate, rule: ChoiceRule) -> Choice:
    """The highest-fidelity assignment within the slack of the fastest one that fits the period (at
    full size if any full-size one fits); if none fits, the one with the shortest predicted round trip.

    Where none fits, the control rate is lost whatever is sent, and what is left to win is the rate
    the loop does reach: one observation per round trip. On a slow link that is the fewest bytes; on
    a fast link at a rate no encoding keeps (a 1 kHz lockstep loop at 10 Gb/s) it is raw, whose 1.8 MB
    cross in 1.5 ms where two JPEG encodes and decodes take 4-5 ms of CPU. (Taking the least link time
    there sent JPEG and lost to a peer sending raw.)"""
    share_ms = rule.max_link_share * rule.period_ms
    scored = [(options, *predict(options, costs, link)) for options in candidates(costs)]
    fits = [row for row in scored if row[2] <= share_ms]
    # Smaller frames only where no full-size assignment fits: they are always faster, never better.
    fitting = [row for row in fits if all(o.downscale == 1 for o in row[0].values())] or fits
    if fitting:
        fastest = min(row[1] for row in fitting)
        good = [row for row in fitting if row[1] <= fastest * (1 + rule.slack) + rule.slack_ms]
        options, predicted, busy_ms = min(good, key=lambda row: (fidelity_steps(row[0], costs), row[1]))
    else:
        options, predicted, busy_ms = min(scored, key=lambda row: (row[1], fidelity_steps(row[0], costs)))
    raw = predict(dict.fromkeys(costs, CodecOption("raw")), costs, link)[0]
    reason = (
        f"link ~{link.mbit_s:,.0f} Mb/s, rtt {link.base_ms:.1f} ms: predicted round trip {predicted:.1f} ms "
        f"(all raw: {raw:.1f} ms), link or coding busy {busy_ms:.1f} of {rule.period_ms:.0f} ms"
    )
    if not fitting:
        reason += "; too slow for the control rate whatever is sent: the fastest round trip taken"
    return Choice(options, predicted, busy_ms, bool(fitting), reason)


class CodecSelector:
    """The encoding each camera uses now: fixed (``codec`` raw / jpeg) or chosen (``auto``).

    The control thread reads :meth:`option` and gives the costs; the link thread feeds probe pairs,
    after which the choice is revisited. Reads need no lock: the choice is replaced as a whole.
    """

    def __init__(
        self,
        codec: str,
        cameras: Sequence[str],
        jpeg_quality: int,
        min_jpeg_quality: int,
        rule: ChoiceRule,
        max_downscale: Mapping[str, int] | None = None,
    ) -> None:
        self.codec = codec  # "auto" | "raw" | "jpeg"
        self.auto = codec == "auto" and bool(cameras)  # nothing to choose without cameras
        self.rule = rule
        lowest = min(min_jpeg_quality, jpeg_quality)
        self.ladders = {
            name: ladder(jpeg_quality, lowest, (max_downscale or {}).get(name, 1)) for name in cameras
        }
        start = CodecOption("raw") if codec == "raw" else CodecOption("jpeg", jpeg_quality)
        why = "link.codec=auto: JPEG until the link is measured" if self.auto else f"link.codec={codec}"
        self.choice = Choice({name: start for name in cameras}, 0.0, 0.0, True, why)
        self.meter = LinkMeter()
        self.costs: dict[str, dict[CodecOption, OptionCost]] = {}
        self.by_ring = False
        self._lock = threading.Lock()
        self._choosing = threading.Lock()
        self._switched_at = -DWELL_S
        self._announce = self.choice.reason

    @property
    def measuring(self) -> bool:
        """Whether the link is to be probed (auto, and frames do not go by the same-host ring)."""
        return self.auto and not self.by_ring

    def option(self, camera: str) -> CodecOption:
        return self.choice.options[camera]

    def use_ring(self, accepted: bool) -> None:
        """The trainer mapped this host's frame ring (True) or the session ended (False)."""
        self.by_ring = accepted
        if accepted and self.auto:
            raw = CodecOption("raw")
            self._set(Choice({c: raw for c in self.choice.options}, 0.0, 0.0, True,
                             "the trainer is on this host: raw frames by shared memory"))  # fmt: skip

    def needs_costs(self) -> bool:
        return self.measuring and len(self.costs) < len(self.choice.options)

    def set_costs(self, camera: str, costs: dict[CodecOption, OptionCost]) -> None:
        """One camera's costs; once every camera has some, the choice is made at once from the link
        as measured at connect (waiting for the next probe would send the start-up JPEG meanwhile,
        which on a slow link fills its queue, and probes then measure the queue, not the link)."""
        with self._lock:
            first = camera not in self.costs
            self.costs[camera] = costs
        if first:
            self._revisit_safely()

    # -- measurements -------------------------------------------------------------------------------
    def probed(self, small_ms: float, large_ms: float, extra_bytes: int) -> None:
        self.meter.add_probe(small_ms, large_ms, extra_bytes)
        self._revisit_safely()

    def _revisit_safely(self) -> None:
        try:
            with self._choosing:  # the link thread (probes) and the control thread (costs) both choose
                self.revisit()
        except Exception:  # the choice must never take the link down: keep the current one
            log.exception("link.codec=auto could not choose; frames stay %s", self.choice.labels())

    # -- the choice ---------------------------------------------------------------------------------
    def revisit(self, now: float | None = None) -> bool:
        """Choose again from the newest measurements; True if the choice changed."""
        link = self.meter.estimate()
        with self._lock:
            costs = dict(self.costs)
        if not self.measuring or link is None or set(costs) != set(self.choice.options):
            return False
        now = time.monotonic() if now is None else now
        best = choose(costs, link, self.rule)
        first = self.choice.predicted_ms == 0  # the start-up choice, made before any measurement
        if best.options == self.choice.options:
            if first:
                self._set(best)  # the same encoding, now with its measured reason
            return False
        if not first and not self._should_leave(best, costs, link, now):
            return False
        self._switched_at = now
        self._set(best)
        return True

    def _should_leave(self, best: Choice, costs: Costs, link: LinkEstimate, now: float) -> bool:
        """Hysteresis: a better-fidelity choice is taken after the dwell time; a lower-fidelity one only
        once the current one no longer fits, or is slower than the best by a clear margin. Where
        nothing fits, only a clear margin moves it, either way: near-equal round trips must not flap."""
        predicted, busy_ms = predict(self.choice.options, costs, link)
        if best.fits and busy_ms > self.rule.max_link_share * self.rule.period_ms:
            return True  # the running choice no longer fits, and one that does exists
        if not best.fits:  # nothing fits: move only to a clearly faster round trip, up or down
            return predicted > best.predicted_ms * (1 + SWITCH_GAIN) + SWITCH_MIN_MS
        if fidelity_steps(best.options, costs) < fidelity_steps(self.choice.options, costs):
            # Up only after the dwell time, and only to a choice with headroom (not one that fits by a
            # hair and would go back down at the next reading of the same link).
            headroom = best.busy_ms <= UP_HEADROOM * self.rule.max_link_share * self.rule.period_ms
            return headroom and now - self._switched_at >= DWELL_S
        limit = best.predicted_ms * (1 + self.rule.slack) + self.rule.slack_ms
        return predicted > limit * (1 + SWITCH_GAIN) + SWITCH_MIN_MS

    def _set(self, choice: Choice) -> None:
        self.choice = choice
        self._announce = f"{choice.labels()}: {choice.reason}"

    def take_announcement(self) -> str:
        """The reason to send with the next observation (once per change, and again per session)."""
        text, self._announce = self._announce, ""
        return text

    def announce_again(self) -> None:
        self._announce = f"{self.choice.labels()}: {self.choice.reason}"
