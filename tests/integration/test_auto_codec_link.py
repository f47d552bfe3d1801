"""link.codec=auto on a shaped link: a 100 Mb/s link makes the agent send JPEG, and when the limit is
lifted (memory-speed loopback) it goes back to raw, in the same session; a 10 Mb/s link makes it send
smaller frames, where the spec allows them. The link is the loopback of a
network namespace shaped with ``tc tbf`` (root only; skipped with the reason elsewhere)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.shaped_link import delete_namespace, shaped_namespace, unshape

PEER = Path(__file__).with_name("auto_codec_peer.py")
NAMESPACE = "rlinf-test-auto-codec"


def wait_for_frames(peer: subprocess.Popen, wanted, timeout: float) -> dict:
    """The first status line from the peer (frames as the trainer sees them, the agent's reason and
    measured link) that satisfies ``wanted``; fails with the last one seen."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        line = peer.stdout.readline()
        if not line:
            break  # the peer ended
        last = json.loads(line)
        if wanted(last):
            return last
    raise AssertionError(f"frames never matched within {timeout} s; last status: {last}")


@pytest.mark.slow
def test_auto_sends_jpeg_on_a_100_mbit_link_and_raw_once_the_link_is_fast():
    prefix, why_not = shaped_namespace(NAMESPACE, "100mbit")
    if why_not:
        pytest.skip(f"no shaped link here: {why_not}")
    peer = subprocess.Popen(
        [*prefix, sys.executable, str(PEER), "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        measured = wait_for_frames(peer, lambda s: "Mb/s" in s["reason"], timeout=30)
        assert measured["frames"].startswith("jpeg") and "raw" not in measured["frames"], measured
        assert measured["mbit_s"] < 300, measured  # near the 100 Mb/s it is shaped to
        assert "raw" not in measured["reason"].split(":")[0], measured  # the reason names the choice
        unshape(NAMESPACE)
        fast = wait_for_frames(peer, lambda s: s["frames"] == "raw", timeout=30)
        assert fast["mbit_s"] > 1000, fast
        assert fast["reason"].startswith("front raw, wrist raw: link ~"), fast
    finally:
        peer.kill()
        peer.wait()
        delete_namespace(NAMESPACE)


@pytest.mark.slow
@pytest.mark.alone  # "keeps the control rate" counts the coding's CPU time, which a busy core inflates
def test_auto_sends_smaller_frames_on_a_10_mbit_link_where_declared_and_the_trainer_gets_them_full_size():
    """Two 480x640 cameras at 30 Hz do not fit 10 Mb/s even at the lowest JPEG quality; with
    ``link.max_downscale=4`` they cross at a lower resolution and decode to the declared size."""
    prefix, why_not = shaped_namespace(NAMESPACE, "10mbit")
    if why_not:
        pytest.skip(f"no shaped link here: {why_not}")
    peer = subprocess.Popen(
        [*prefix, sys.executable, str(PEER), "60", "480", "640", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        smaller = wait_for_frames(peer, lambda s: "Mb/s" in s["reason"] and "1/" in s["frames"], timeout=40)
        assert smaller["mbit_s"] < 30, smaller  # near the 10 Mb/s it is shaped to
        assert "too slow" not in smaller["reason"], smaller  # the smaller frames keep the control rate
        assert "1/" in smaller["reason"].split(":")[0], smaller  # the announced choice names the scale
        later = wait_for_frames(peer, lambda s: s["decoded"] is not None and "1/" in s["frames"], timeout=10)
        assert later["decoded"] == [480, 640, 3], later
    finally:
        peer.kill()
        peer.wait()
        delete_namespace(NAMESPACE)
