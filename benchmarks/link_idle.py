"""What an idle 30 Hz loop pays on top of a busy one: the idle wake-up cost of our link, measured apart.

At 30 Hz the agent, the link server and their threads sleep for most of each 33 ms period, and so do
this VM's cores. A lockstep loop (the next observation as soon as the answer is in) keeps them busy.
Four runs per link and codec, alternating, same payload as ``link_compare.py``:

* ``30hz_cores_may_halt``: the agent's control loop at 30 Hz, as a robot runs it, without the
  agent's PM QoS request (``keep_cores_awake = false``, or no permission to make it);
* ``30hz``: the same as the agent runs by default: it holds ``/dev/cpu_dma_latency`` at 0 us, so the
  kernel polls rather than halts the idle cores (``robot_agent/core_wake.py``);
* ``30hz_cores_kept_busy``: without the request, but with one ``SCHED_IDLE`` busy loop per core. Such
  a task runs only when nothing else wants the core, so no core ever halts, but it takes no time from
  our threads (the scheduler preempts it at once when one wakes). The user-space way to the same end;
* ``lockstep``: the loop ticking as fast as answers come (up to 1 kHz).

``30hz_cores_may_halt - 30hz_cores_kept_busy`` is the cores' wake-up cost, ``30hz_cores_may_halt -
30hz`` what the agent's request buys back of it; ``30hz - lockstep`` is what is left of the idle
cost (caches, our threads' own wake-ups).

    sudo python benchmarks/link_idle.py [--links loopback,1gbit] [--codecs jpeg,auto] [--rounds 3] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from link_compare import NAMESPACE, median_of_rounds, run_ours
from shaped_link import delete_namespace, shaped_namespace

RESULTS = Path(__file__).resolve().parent / "results"
SPINNER = "import os\nos.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\nwhile True:\n    pass\n"


class BusyCores:
    """One ``SCHED_IDLE`` busy loop per core, for the duration of a ``with`` block."""

    def __enter__(self) -> BusyCores:
        self.procs = [subprocess.Popen([sys.executable, "-c", SPINNER]) for _ in range(os.cpu_count() or 1)]
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


def measure(prefix: list[str], codec: str, seconds: float, variant: str) -> dict:
    ring = 16 if not prefix and codec != "jpeg" else 0  # the frame ring on this host, as auto uses it
    if variant == "30hz_cores_kept_busy":
        with BusyCores():
            return run_ours(prefix, codec, ring, seconds, keep_cores_awake=False)
    if variant == "30hz_cores_may_halt":
        return run_ours(prefix, codec, ring, seconds, keep_cores_awake=False)
    return run_ours(prefix, codec, ring, seconds, lockstep=variant == "lockstep")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--links", default="loopback,1gbit")
    parser.add_argument("--codecs", default="jpeg,auto")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="measured seconds per run (after a warm-up)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "link_idle.json")
    args = parser.parse_args()
    variants = ("30hz_cores_may_halt", "30hz", "30hz_cores_kept_busy", "lockstep")
    results: dict = {"payload": "2 x 640x480 RGB + float32[16] up, float32[50,7] down", "links": {}}
    for link in args.links.split(","):
        prefix, why_not = ([], "") if link == "loopback" else shaped_namespace(NAMESPACE, link)
        if why_not:
            raise SystemExit(f"{link}: {why_not}")
        try:
            for codec in args.codecs.split(","):
                rounds = [
                    {v: measure(prefix, codec, args.seconds, v) for v in variants} for _ in range(args.rounds)
                ]
                row = {v: median_of_rounds([r[v] for r in rounds]) for v in variants}
                p50 = {v: row[v].get("p50_ms", float("nan")) for v in variants}
                row["cores_wake_up_ms"] = p50["30hz_cores_may_halt"] - p50["30hz_cores_kept_busy"]
                row["pm_qos_saves_ms"] = p50["30hz_cores_may_halt"] - p50["30hz"]
                row["rest_of_idle_cost_ms"] = p50["30hz"] - p50["lockstep"]
                results["links"].setdefault(link, {})[codec] = row
                print(f"{link:9s} {codec:5s} p50: 30 Hz, cores may halt {p50['30hz_cores_may_halt']:.2f} ms, "
                      f"30 Hz (agent's PM QoS) {p50['30hz']:.2f} ms, 30 Hz with cores kept busy "
                      f"{p50['30hz_cores_kept_busy']:.2f} ms, lockstep {p50['lockstep']:.2f} ms "
                      f"({row['30hz'].get('frames', '')})", flush=True)  # fmt: skip
        finally:
            if prefix:
                delete_namespace(NAMESPACE)
    results["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    results["settings"] = vars(args) | {"out": str(args.out)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
