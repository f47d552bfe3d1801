"""What an idle 30 Hz loop pays on top of a busy one: the idle wake-up cost of our link, measured apart.

At 30 Hz the agent, the link server and their threads sleep for most of each 33 ms period, and so do
this VM's cores. A lockstep loop (the next observation as soon as the answer is in) keeps them busy.
Four runs per link and codec, alternating, same payload as ``link_compare.py``, each with the
agent's control loop at 30 Hz as a robot runs it, except the last (``robot_agent/core_wake.py``):

* ``30hz_may_halt``: without the agent's PM QoS request (``keep_cores_awake = false``, or no
  permission to make it): idle cores halt;
* ``30hz``: as the agent runs by default: it holds ``/dev/cpu_dma_latency`` at 0 us, so the kernel
  polls rather than halts idle cores (on a VM its polling loop may still exit to the hypervisor);
* ``30hz_spin``: also ``spin_idle_cores = true``: one ``SCHED_IDLE`` busy loop per core. Such a task
  runs only when nothing else wants the core, so no core ever halts, but it takes no time from our
  threads (the scheduler preempts it at once when one wakes);
* ``lockstep``: the loop ticking as fast as answers come (up to 1 kHz).

``30hz_may_halt - 30hz`` is what the PM QoS request buys back, ``30hz_may_halt - 30hz_spin`` the
whole wake-up cost of halted cores; ``30hz_spin - lockstep`` is what is left of the idle cost
(caches, our threads' own wake-ups).

    sudo python benchmarks/link_idle.py [--links loopback,1gbit] [--codecs jpeg,auto] [--rounds 3] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

from link_compare import NAMESPACE, median_of_rounds, run_ours
from shaped_link import delete_namespace, shaped_namespace

RESULTS = Path(__file__).resolve().parent / "results"
VARIANTS = ("30hz_may_halt", "30hz", "30hz_spin", "lockstep")


def measure(prefix: list[str], codec: str, seconds: float, variant: str) -> dict:
    ring = 16 if not prefix and codec != "jpeg" else 0  # the frame ring on this host, as auto uses it
    if variant == "lockstep":
        return run_ours(prefix, codec, ring, seconds, lockstep=True)
    return run_ours(
        prefix, codec, ring, seconds, cores=variant.removeprefix("30hz_") if "_" in variant else "pm_qos"
    )


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
    variants = VARIANTS
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
                row["pm_qos_saves_ms"] = p50["30hz_may_halt"] - p50["30hz"]
                row["cores_wake_up_ms"] = p50["30hz_may_halt"] - p50["30hz_spin"]
                row["rest_of_idle_cost_ms"] = p50["30hz_spin"] - p50["lockstep"]
                results["links"].setdefault(link, {})[codec] = row
                print(f"{link:9s} {codec:5s} p50 at 30 Hz: cores may halt {p50['30hz_may_halt']:.2f} ms, "
                      f"PM QoS (default) {p50['30hz']:.2f} ms, spinning idle cores {p50['30hz_spin']:.2f} ms; "
                      f"lockstep {p50['lockstep']:.2f} ms ({row['30hz'].get('frames', '')})", flush=True)  # fmt: skip
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
