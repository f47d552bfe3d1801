"""Keep the robot PC's cores out of their idle states while the agent runs (Linux PM QoS).

A 30 Hz agent sleeps most of each period, and so do the host's cores. Waking a halted core costs
time on every hand-off of a round trip (control thread, link thread, gRPC, and back): about 1.6 ms
of a 9 ms round trip on our VM (``benchmarks/link_idle.py``), where each wake-up is a trip through
the hypervisor. Real-time setups turn deep idle states off for this reason.

The kernel's documented way to ask for that from user space is the PM QoS file
``/dev/cpu_dma_latency``: while a process holds it open with a 32-bit value written, no core enters an
idle state whose exit latency exceeds that many microseconds (0: the cores poll instead of halting).
Closing the file drops the request, so a killed agent cannot leave it behind. Writing needs root or
a udev rule granting the agent's user write access to the file.
"""

from __future__ import annotations

import logging
import os
import struct
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

PM_QOS_FILE = Path("/dev/cpu_dma_latency")


class IdleStateLimit:
    """Holds a PM QoS request for at most ``max_exit_latency_us`` of core wake-up latency.

    ``hold()`` returns whether the kernel took the request; where it cannot (not Linux, no
    permission) it logs why once and the agent runs as before.
    """

    def __init__(self, max_exit_latency_us: int = 0, path: Path | str = PM_QOS_FILE) -> None:
        if max_exit_latency_us < 0:
            raise ValueError(f"max_exit_latency_us must be >= 0, got {max_exit_latency_us}")
        self.max_exit_latency_us = max_exit_latency_us
        self.path = Path(path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def hold(self) -> bool:
        if self._fd is not None:
            return True
        try:
            fd = os.open(self.path, os.O_WRONLY)
        except OSError as exc:
            log.warning(
                "cores may halt between ticks (+~1-2 ms per round trip): cannot open %s (%s); run the "
                "agent as root or grant its user write access to that file (udev rule), or set "
                "keep_cores_awake = false to silence this",
                self.path, exc.strerror or exc,
            )  # fmt: skip
            return False
        try:
            os.write(fd, struct.pack("=i", self.max_exit_latency_us))
        except OSError as exc:
            os.close(fd)
            log.warning("cores may halt between ticks: %s refused the request (%s)", self.path, exc)
            return False
        self._fd = fd
        log.info("cores kept out of idle states deeper than %d us while the agent runs (%s)",
                 self.max_exit_latency_us, self.path)  # fmt: skip
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> IdleStateLimit:
        self.hold()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def current_limit_us(path: Path | str = PM_QOS_FILE) -> int:
    """The kernel's aggregate wake-up latency limit now (microseconds): what every holder asked, at least."""
    with open(path, "rb") as f:
        return struct.unpack("=i", f.read(4))[0]


# One busy loop at the lowest priority, which exits when its parent (the agent) is gone.
_SPINNER = """
import os, sys
os.sched_setaffinity(0, {int(sys.argv[2])})
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
parent = int(sys.argv[1])
while os.getppid() == parent:
    for _ in range(100_000):
        pass
"""


class IdleCoreSpinners:
    """One ``SCHED_IDLE`` busy loop pinned to each core the agent may use, while held.

    A ``SCHED_IDLE`` task runs only when nothing else wants its core, so the core never halts, yet
    the scheduler preempts it the moment another thread wakes: it costs power, not time. Where the
    PM QoS request does not keep a core awake (a VM, whose polling idle loop still exits to the
    hypervisor) or cannot be made (no permission), this does, from user space. A spinner exits
    within milliseconds of its agent, however the agent ends.
    """

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen] = []

    @property
    def held(self) -> bool:
        return bool(self._procs)

    def hold(self) -> bool:
        if self._procs:
            return True
        if not hasattr(os, "SCHED_IDLE"):
            log.warning("spin_idle_cores needs Linux's SCHED_IDLE; cores may halt between ticks")
            return False
        cores = sorted(os.sched_getaffinity(0))
        self._procs = [
            subprocess.Popen([sys.executable, "-c", _SPINNER, str(os.getpid()), str(core)]) for core in cores
        ]
        log.info("one SCHED_IDLE busy loop on each of cores %s while the agent runs", cores)
        return True

    def release(self) -> None:
        for proc in self._procs:
            proc.kill()
        for proc in self._procs:
            proc.wait()
        self._procs = []
