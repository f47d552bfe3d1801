"""link.codec=auto on a shaped link: a 100 Mb/s link makes the agent send JPEG, and when the limit is
lifted (memory-speed loopback) it goes back to raw, in the same session. The link is the loopback of a
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
