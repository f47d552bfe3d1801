"""Shaped links on one host: a network namespace whose loopback is rate-limited with ``tc tbf``.

This kernel has no netem, so a link is a rate and a queue, not a delay. The namespace's loopback gets
an Ethernet MTU (1500), so packets are small (tbf drops, for good, a packet larger than its burst),
and bursts of about a millisecond of the rate (a burst as large as an observation would let each one
through unshaped at 30 Hz). Needs root, ``ip`` and ``tc``. Used by ``link_compare.py`` and by the
shaped-link test of ``link.codec=auto``.
"""

from __future__ import annotations

import os
import shutil
import subprocess

RATES = {"10gbit": ("10gbit", "1250kb"), "1gbit": ("1gbit", "125kb"), "100mbit": ("100mbit", "16kb"),
         "10mbit": ("10mbit", "8kb")}  # fmt: skip


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(command), capture_output=True, text=True)


def shaped_namespace(name: str, rate: str | None) -> tuple[list[str], str]:
    """Make namespace ``name`` with its loopback up (shaped to ``rate``, one of :data:`RATES`, unless
    None): returns (the command prefix that runs a program in it, '' or why it could not be made)."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        return [], "needs root with ip and tc"
    delete_namespace(name)
    inside = ["ip", "netns", "exec", name]
    steps = [["ip", "netns", "add", name], [*inside, "ip", "link", "set", "lo", "mtu", "1500", "up"]]
    if rate is not None:
        steps.append([*inside, "tc", "qdisc", "add", "dev", "lo", "root", "tbf",
                      "rate", RATES[rate][0], "burst", RATES[rate][1], "latency", "1s"])  # a queue, not drops  # fmt: skip
    for step in steps:
        done = _run(*step)
        if done.returncode != 0:
            delete_namespace(name)
            return [], f"{' '.join(step[:4])}: {done.stderr.strip()}"
    return inside, ""


def unshape(name: str) -> None:
    """Take the rate limit off the namespace's loopback (it runs at memory speed again)."""
    done = _run("ip", "netns", "exec", name, "tc", "qdisc", "del", "dev", "lo", "root")
    if done.returncode != 0:
        raise RuntimeError(f"tc qdisc del in {name}: {done.stderr.strip()}")


def delete_namespace(name: str) -> None:
    _run("ip", "netns", "del", name)
