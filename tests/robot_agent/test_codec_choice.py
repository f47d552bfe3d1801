"""link.codec=auto: the choice from measured costs and a measured link, the meter, and the hysteresis."""

import numpy as np
import pytest

from robot_agent.codec_choice import (
    DWELL_S,
    ChoiceRule,
    CodecOption,
    CodecSelector,
    LinkEstimate,
    LinkMeter,
    OptionCost,
    choose,
    ladder,
    measure_costs,
)
from robot_agent.config import AgentConfigError, LinkConfig

RAW, Q90, Q75, Q50 = ladder(90, 50)
RULE = ChoiceRule(period_ms=1000 / 30)  # 30 Hz


def camera_costs(pixels: int) -> dict[CodecOption, OptionCost]:
    """What the options cost on a camera-like frame of ``pixels`` (as measured on 640x480, scaled)."""
    scale = pixels / (640 * 480)
    return {
        RAW: OptionCost(pixels * 3, 0.05 * scale, 0.04 * scale),
        Q90: OptionCost(int(67_000 * scale), 0.8 * scale, 0.87 * scale),
        Q75: OptionCost(int(27_000 * scale), 0.64 * scale, 0.53 * scale),
        Q50: OptionCost(int(12_000 * scale), 0.56 * scale, 0.39 * scale),
    }


TWO_VGA = {"front": camera_costs(640 * 480), "wrist": camera_costs(640 * 480)}
LINKS = {  # base round trip (ms) and bytes per ms
    "loopback": LinkEstimate(0.3, 2_000_000),  # 16 Gb/s
    "1gbit": LinkEstimate(0.5, 125_000),
    "100mbit": LinkEstimate(0.8, 12_500),
    "10mbit": LinkEstimate(2.0, 1_250),
}


def test_the_ladder_runs_from_raw_down_to_the_lowest_quality_allowed():
    assert [o.label for o in ladder(90, 50)] == ["raw", "jpeg q90", "jpeg q75", "jpeg q50"]
    assert [o.label for o in ladder(95, 40)] == ["raw", "jpeg q95", "jpeg q75", "jpeg q50", "jpeg q40"]
    assert [o.label for o in ladder(60, 60)] == ["raw", "jpeg q60"]


def test_raw_on_a_fast_link_jpeg_on_a_slow_one_and_lower_quality_on_a_slower_one():
    by_link = {name: choose(TWO_VGA, link, RULE) for name, link in LINKS.items()}
    assert set(by_link["loopback"].options.values()) == {RAW}
    gigabit = set(by_link["1gbit"].options.values())
    assert RAW not in gigabit  # 1.8 MB of raw frames take 15 ms there; JPEG takes a few
    slow = set(by_link["100mbit"].options.values())
    assert RAW not in slow and max(o.quality for o in slow) < max(o.quality for o in gigabit)
    assert all(choice.fits for name, choice in by_link.items() if name != "10mbit")


def test_a_link_too_slow_for_the_rate_takes_the_least_bytes_and_says_so():
    choice = choose(TWO_VGA, LINKS["10mbit"], RULE)
    assert set(choice.options.values()) == {Q50}
    assert not choice.fits and "too slow for the control rate" in choice.reason


def test_a_rate_no_encoding_keeps_takes_the_fastest_round_trip():
    """A 1 kHz lockstep loop fits no link: at 10 Gb/s raw's 1.8 MB cross faster than two JPEG encodes
    and decodes take, so raw; at 1 Gb/s raw takes 15 ms, so the cheapest JPEG."""
    lockstep = ChoiceRule(period_ms=1.0)
    ten_gbit = LinkEstimate(0.3, 1_250_000)
    fast = choose(TWO_VGA, ten_gbit, lockstep)
    assert not fast.fits and set(fast.options.values()) == {RAW}, fast.reason
    assert "fastest round trip" in fast.reason
    slow = choose(TWO_VGA, LINKS["1gbit"], lockstep)
    assert set(slow.options.values()) == {Q50}


def test_where_nothing_fits_only_a_clearly_faster_round_trip_moves_the_choice():
    lockstep = ChoiceRule(period_ms=1.0)
    selector = CodecSelector("auto", ["front", "wrist"], 90, 50, lockstep)
    for camera, costs in TWO_VGA.items():
        selector.set_costs(camera, costs)
    assert fed(selector, LinkEstimate(0.3, 1_250_000), now=0.0) and selector.option("front") == RAW
    # A slower reading where Q50 is predicted a little faster than raw: raw stays.
    near = LinkEstimate(0.3, 1_000_000)
    assert set(choose(TWO_VGA, near, lockstep).options.values()) == {Q50}
    assert not fed(selector, near, now=100.0) and selector.option("front") == RAW
    # A gigabit reading, where raw takes 15 ms: JPEG at once.
    assert fed(selector, LINKS["1gbit"], now=100.5) and selector.option("front") == Q50
    # Back at 10 Gb/s raw is predicted a little faster than Q50: Q50 stays (no flapping up either) ...
    assert not fed(selector, LinkEstimate(0.3, 1_250_000), now=200.0) and selector.option("front") == Q50
    # ... and on loopback, clearly faster: raw again, though raw does not fit the period either.
    assert fed(selector, LINKS["loopback"], now=300.0) and selector.option("front") == RAW


def with_smaller_frames(
    costs: dict[CodecOption, OptionCost], max_downscale: int
) -> dict[CodecOption, OptionCost]:
    """``costs`` plus the downscaled options of ``ladder(90, 50, max_downscale)``: a factor k sends
    1/k^2 of the pixels and codes them in about that share of the time."""
    smaller = ladder(90, 50, max_downscale)[len(costs) :]
    lowest = costs[Q50]
    return {**costs, **{o: OptionCost(lowest.bytes // o.downscale**2, lowest.encode_ms / o.downscale**2,
                                      lowest.decode_ms / o.downscale**2) for o in smaller}}  # fmt: skip


def test_the_resolution_goes_only_after_the_quality_and_only_as_far_as_declared():
    assert [o.label for o in ladder(90, 50, 4)] == [
        "raw", "jpeg q90", "jpeg q75", "jpeg q50", "jpeg q50 1/2", "jpeg q50 1/4"
    ]  # fmt: skip
    assert ladder(90, 50, 1) == ladder(90, 50)


def test_a_link_too_slow_for_the_lowest_quality_gets_smaller_frames_that_keep_the_rate():
    costs = {camera: with_smaller_frames(c, 4) for camera, c in TWO_VGA.items()}
    choice = choose(costs, LINKS["10mbit"], RULE)
    assert choice.fits, choice.reason  # where full-size frames at q50 do not (the test above)
    assert {o.downscale for o in choice.options.values()} <= {2, 4} and max(
        o.downscale for o in choice.options.values()
    ) > 1
    # ... and frames stay full size wherever full size fits
    assert all(o.downscale == 1 for o in choose(costs, LINKS["100mbit"], RULE).options.values())


def test_each_camera_gets_its_own_option():
    """A small wrist camera is cheap to send raw where the scene camera's raw frames are not."""
    costs = {"front": camera_costs(640 * 480), "wrist": camera_costs(64 * 64)}
    choice = choose(costs, LINKS["1gbit"], RULE)
    assert choice.options["wrist"] == RAW
    assert choice.options["front"].codec == "jpeg"


def test_the_meter_recovers_base_and_rate_from_probe_pairs():
    meter = LinkMeter()
    assert meter.estimate() is None
    assert meter.probe_bytes(cap=10_000_000) == 32 * 1024  # before any measurement: a small probe
    base, rate = 0.4, 12_500.0  # 100 Mb/s
    for noise in (0.0, 0.1, -0.05, 0.2, 0.0):
        size = meter.probe_bytes(cap=10_000_000)
        meter.add_probe(base + abs(noise), base + noise + size / rate, size)
    estimate = meter.estimate()
    assert estimate.base_ms == pytest.approx(base)
    assert estimate.mbit_s == pytest.approx(100, rel=0.1)
    assert meter.probe_bytes(cap=10_000_000) == pytest.approx(4 * rate, rel=0.1)  # ~4 ms of the link
    assert meter.probe_bytes(cap=20_000) == 20_000


def fed(selector: CodecSelector, link: LinkEstimate, now: float, pairs: int = 5) -> bool:
    """Replace the meter's window with ``link``'s figures, then let the selector choose at ``now``."""
    for _ in range(pairs):
        selector.meter.add_probe(link.base_ms, link.base_ms + 1e6 / link.bytes_per_ms, 1_000_000)
    return selector.revisit(now=now)


def test_auto_starts_on_jpeg_then_follows_the_link_without_flapping():
    selector = CodecSelector("auto", ["front", "wrist"], 90, 50, RULE)
    assert selector.measuring and {o.label for o in selector.choice.options.values()} == {"jpeg q90"}
    for camera, costs in TWO_VGA.items():
        selector.set_costs(camera, costs)
    assert fed(selector, LINKS["loopback"], now=100.0)  # the first measurement is taken at once
    assert selector.option("front") == RAW
    assert "front raw" in selector.take_announcement() and selector.take_announcement() == ""

    assert fed(selector, LINKS["100mbit"], now=100.5)  # raw no longer fits the period: down at once
    assert selector.option("front").codec == "jpeg"
    slow = dict(selector.choice.options)

    assert not fed(selector, LINKS["loopback"], now=101.0)  # up again, but only after the dwell time
    assert selector.choice.options == slow
    assert fed(selector, LINKS["loopback"], now=100.5 + DWELL_S)
    assert selector.option("front") == RAW

    # A slightly slower reading of a fast link, where raw still fits, does not send it back down.
    assert not fed(selector, LinkEstimate(0.6, 1_500_000), now=200.0)
    assert selector.option("front") == RAW


def test_the_first_choice_is_made_as_soon_as_the_costs_are_known_from_the_link_measured_at_connect():
    """Not at the next probe: until then the start-up JPEG would flood a slow link's queue, and a
    probe pair through a full queue measures the queue."""
    selector = CodecSelector("auto", ["front", "wrist"], 90, 50, RULE)
    for _ in range(3):  # at connect, before any frame
        selector.meter.add_probe(0.8, 0.8 + 1e6 / LINKS["100mbit"].bytes_per_ms, 1_000_000)
    selector.set_costs("front", TWO_VGA["front"])
    assert selector.option("front").label == "jpeg q90"  # not every camera's costs yet
    selector.set_costs("wrist", TWO_VGA["wrist"])
    assert selector.choice.fits and "Mb/s" in selector.choice.reason
    assert selector.choice.options == choose(TWO_VGA, selector.meter.estimate(), RULE).options


def test_a_choice_moves_up_only_to_one_with_headroom():
    costs = {"front": with_smaller_frames(camera_costs(640 * 480), 2)}
    five_mbit = LinkEstimate(2.0, 625)
    share = RULE.max_link_share * RULE.period_ms
    selector = CodecSelector("auto", ["front"], 90, 50, RULE, {"front": 2})
    selector.set_costs("front", costs["front"])
    assert fed(selector, five_mbit, now=0.0) and selector.option("front").downscale == 2
    # A link where full-size q50 fits, but by a hair: no move up, however long it lasts.
    hair = LinkEstimate(2.0, costs["front"][Q50].bytes / (0.97 * share))
    assert choose(costs, hair, RULE).options["front"] == Q50
    assert not fed(selector, hair, now=100.0) and selector.option("front").downscale == 2
    roomy = LinkEstimate(2.0, costs["front"][Q50].bytes / (0.6 * share))
    assert fed(selector, roomy, now=200.0) and selector.option("front").downscale == 1


def test_the_same_host_ring_settles_it_and_fixed_codecs_or_no_cameras_never_measure():
    selector = CodecSelector("auto", ["front"], 90, 50, RULE)
    selector.use_ring(True)
    assert selector.option("front") == RAW and not selector.measuring
    assert "shared memory" in selector.take_announcement()
    for codec, label in (("jpeg", "jpeg q90"), ("raw", "raw")):
        fixed = CodecSelector(codec, ["front"], 90, 50, RULE)
        fixed.set_costs("front", TWO_VGA["front"])
        assert not fixed.measuring and not fed(fixed, LINKS["10mbit"], now=1.0)
        assert fixed.option("front").label == label
    declared = CodecSelector("auto", ["front", "wrist"], 90, 50, RULE, {"front": 2})
    assert declared.ladders["front"][-1].label == "jpeg q50 1/2" and declared.ladders["wrist"] == ladder(
        90, 50
    )
    blind = CodecSelector("auto", [], 90, 50, RULE)
    assert not blind.measuring and not fed(blind, LINKS["loopback"], now=1.0)


def test_costs_are_measured_on_the_real_frame():
    rng = np.random.default_rng(0)
    frame = np.clip(np.full((120, 160, 3), 128.0) + rng.normal(0, 6, (120, 160, 3)), 0, 255).astype(np.uint8)
    costs = measure_costs(frame, ladder(90, 50), repeats=1)
    assert list(costs) == list(ladder(90, 50))
    assert costs[RAW].bytes == 120 * 160 * 3
    assert costs[RAW].bytes > costs[Q90].bytes > costs[Q75].bytes > costs[Q50].bytes
    assert all(c.encode_ms > 0 and c.decode_ms > 0 for c in costs.values())


@pytest.mark.parametrize(
    ("values", "message"),
    [({"codec": "png"}, "'auto', 'jpeg' or 'raw'"), ({"min_jpeg_quality": 0}, "min_jpeg_quality"),
     ({"max_link_share": 1.5}, "max_link_share"), ({"probe_interval_s": 0}, "probe_interval_s"),
     ({"max_downscale": 3}, r"max_downscale must be one of \(1, 2, 4, 8\)")],
)  # fmt: skip
def test_bad_codec_settings_are_named(values, message):
    with pytest.raises(AgentConfigError, match=message):
        LinkConfig(insecure=True, **values)


def test_auto_is_the_default():
    assert LinkConfig(insecure=True).codec == "auto"


@pytest.mark.parametrize("part_bytes", [1024, 8 << 20])
def test_upload_parts_fit_what_a_trainer_sized_by_its_schema_receives(part_bytes):
    with pytest.raises(AgentConfigError, match=r"upload_part_bytes must be 64 KiB to 4 MiB"):
        LinkConfig(insecure=True, upload_part_bytes=part_bytes)
    assert LinkConfig(insecure=True).upload_part_bytes == 4 << 20
