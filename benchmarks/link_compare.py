"""Our robot link against openpi's and LeRobot's, on the same payload, in one run: loopback and shaped links.

Payload: two 640x480 RGB frames and a float32[16] state up, a float32[50, 7] action chunk down. Each
side's server makes arrays of the frames (no copy where it can) and answers at once.

* **openpi**: ``openpi_client.WebsocketClientPolicy`` (pinned, installed by this script in its own
  venv under ``runs/bench_venvs/openpi``) against a server speaking its protocol
  (``benchmarks/peers/openpi_peer.py``): lockstep (back to back) and paced at 30 Hz.
* **LeRobot**: its async-inference transport (``lerobot.transport``: gRPC, pickled observations
  streamed in parts, pickled action chunks; pinned, in ``runs/bench_venvs/lerobot``) between a server
  and a client that use it as its policy server and robot client do (``benchmarks/peers/lerobot_peer.py``).
* **ours**: the real agent (control loop at 30 Hz, safety, spool) and the real link server
  (``benchmarks/link_latency.py``'s ``run_link``): raw frames by the same-host frame ring, raw
  frames in-band (as to another host), and JPEG q90; measured after a warm-up (``WARMUP_S``).
  Lockstep as well as at 30 Hz: in lockstep each observation waits for the answer to the one before
  (the control loop ticks up to 1 kHz), so one round trip is in flight at a time, as in the peers'.

Links: loopback, and loopback shaped with ``tc tbf`` inside a network namespace (``ip netns``,
needs root; this kernel has no netem) at 10 Gb/s, 1 Gb/s and 100 Mb/s. On a shaped link, which
stands for another host, our raw frames go in-band (no ring). Figures: round trip p50/p99 and, at
30 Hz, ticks whose answer came later than the period. Ratios compare like with like (lockstep with
lockstep, 30 Hz with 30 Hz): an idle 30 Hz loop pays wake-ups that a busy lockstep loop does not.

    sudo python benchmarks/link_compare.py [--requests 300] [--links loopback,10gbit,1gbit,100mbit] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
from shaped_link import delete_namespace, shaped_namespace

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
PEER_VENVS = ROOT / "runs" / "bench_venvs"
OPENPI_PINS = ["openpi-client==0.1.2", "websockets==17.4", "msgpack==1.2.4", "numpy==1.26.4",
               "typing_extensions==4.16.0"]  # fmt: skip
# LeRobot's transport only (its full install pins a CUDA torch < 2.8 and every policy's dependencies):
# the package without its dependencies, then what ``lerobot.transport`` imports, at LeRobot's own
# grpcio / protobuf pins (its ``async`` extra) and the local CPU torch.
LEROBOT_NO_DEPS = ["lerobot==0.4.1"]
LEROBOT_PINS = ["grpcio==1.73.1", "protobuf==6.31.0", "huggingface_hub==0.35.3", "numpy==2.2.6",
                "torch==2.13.0"]  # fmt: skip
NAMESPACE = "rlinf-link-bench"
# Our server of openpi's protocol, in this venv, where the peers' servers run (in the shaped namespace too).
OURS_OPENPI = [sys.executable, str(Path(__file__).parent / "peers" / "rlinf_openpi_server.py")]
# Ours is measured after one 300-step episode at 30 Hz. Until then the trainer's per-robot buffers
# (its newest 256 observations, the open episode it records) are filling, and each raw frame lands
# on memory the process touches for the first time (page faults: 1-2 ms per observation of two
# 640x480 frames); afterwards frames reuse the memory of those let go. The peers keep nothing.
WARMUP_S = 12.0
PERIOD_MS = 1000 / 30
LOCKSTEP_MAX_HZ = 1000.0


def summary(samples: list[float]) -> dict[str, float]:
    data = np.asarray(samples)
    return {"p50_ms": float(np.percentile(data, 50)), "p99_ms": float(np.percentile(data, 99)),
            "late_over_33ms": int((data > PERIOD_MS).sum()), "n": len(data)}  # fmt: skip


# -- peers ------------------------------------------------------------------------------------------
def peer_python(name: str, pins: list[str], no_deps: tuple[str, ...] = ()) -> Path:
    """The peer's own venv (built once, pinned), so its dependencies never meet ours; ``no_deps`` are
    installed without their dependencies."""
    venv = PEER_VENVS / name
    python = venv / "bin" / "python"
    stamp = venv / "pins.txt"
    wanted = "\n".join([*no_deps, *pins])
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"[link_compare] installing {name} ({', '.join([*no_deps, *pins])}) in {venv}", flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if no_deps:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", *no_deps], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
    stamp.write_text(wanted)
    return python


def median_of_rounds(figures: list[dict]) -> dict:
    """One side's figures over the rounds: the median of each round's p50 and p99, late ticks summed,
    and each round's p50 kept. A side that failed in any round is reported failed."""
    failed = [f["failed"] for f in figures if "failed" in f]
    if failed:
        return {"failed": failed[0]}
    if len(figures) == 1:
        return figures[0]
    merged = dict(figures[-1])  # the last round's other fields (n, frames, ...)
    for key in ("p50_ms", "p99_ms"):
        merged[key] = float(np.median([f[key] for f in figures]))
    for key in ("late_over_33ms", "missed_ticks", "dropped"):
        if key in merged:
            merged[key] = int(sum(f[key] for f in figures))
    merged["round_p50s_ms"] = [round(f["p50_ms"], 3) for f in figures]
    return merged


def run_peer(
    peer: str, prefix: list[str], python: Path, requests: int, hz: float, server_argv: list[str] | None = None
) -> dict:
    """A peer's server and client (``peers/<peer>_peer.py``) in its venv: round-trip figures.
    ``server_argv`` (then given the port file) runs another server for the peer's client: ours."""
    script = str(Path(__file__).parent / "peers" / f"{peer}_peer.py")
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        server = subprocess.Popen(
            [*(server_argv or [*prefix, str(python), script, "serve"]), str(port_file)],
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while not (port_file.exists() and port_file.read_text()) and time.monotonic() < deadline:
                time.sleep(0.05)
            out = subprocess.run(
                [*prefix, str(python), script, "client", port_file.read_text(), str(requests), "20", str(hz)],
                capture_output=True, text=True, timeout=900,
            )  # fmt: skip
        finally:
            server.kill()
            server.wait()
    if out.returncode != 0:
        return {
            "failed": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
        }
    return summary(json.loads(out.stdout.strip().splitlines()[-1]))


def run_ours(
    prefix: list[str], codec: str, ring_slots: int, duration_s: float, lockstep: bool = False,
    cores: str = "pm_qos",
) -> dict:  # fmt: skip
    """Our link in a subprocess (under ``prefix``: a network namespace). ``cores``: how the agent keeps
    the cores awake between 30 Hz ticks (``robot_agent/core_wake.py``): ``pm_qos`` (the default),
    ``may_halt`` (no request, as where it has no permission) or ``spin`` (also ``spin_idle_cores``)."""
    mode = "lockstep" if lockstep else "30hz" if cores == "pm_qos" else f"30hz_{cores}"
    out = subprocess.run(
        [*prefix, sys.executable, __file__, "--ours", codec, str(ring_slots), str(duration_s), mode],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    if out.returncode != 0:
        return {
            "failed": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
        }
    return json.loads(out.stdout.strip().splitlines()[-1])


def ours_in_this_process(codec: str, ring_slots: int, duration_s: float, mode: str) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    import link_latency

    frames = link_latency.render_scene_frames(6.0)
    lockstep = mode == "lockstep"
    cores = {"30hz_may_halt": "may_halt", "30hz_spin": "spin"}.get(mode, "pm_qos")
    # Lockstep: the control loop may tick at up to 1 kHz, and each observation waits for the answer
    # to the one before it (``run_link(lockstep=True)``).
    hz = LOCKSTEP_MAX_HZ if lockstep else 30.0
    try:
        result = link_latency.run_link(
            frames,
            hz,
            duration_s,
            300,
            codec,
            ring_slots,
            decode="view",
            warmup_s=WARMUP_S,
            lockstep=lockstep,
            keep_cores_awake=cores != "may_halt",
            spin_idle_cores=cores == "spin",
        )
    except IndexError:  # no chunk came back at all: the link cannot carry this payload
        print(json.dumps({"failed": f"no round trip completed: the link cannot carry the payload ({mode})"}))
        return
    figures = {**result["round_trip"], "late_over_33ms": result["late_over_33ms"],
               "dropped": result["dropped_observations"], "frames": result["frames"]}  # fmt: skip
    if lockstep:
        figures["round_trips_per_s"] = result["answers_per_s"]
    else:  # a lockstep loop ticks as fast as answers come: its missed ticks mean nothing
        figures["missed_ticks"] = result["missed_ticks"]
    print(json.dumps(figures))


TARGET_SPEEDUP = {"10gbit": 1.0, "1gbit": 3.0, "100mbit": 10.0}  # ours faster than each peer by this
MODES = ("lockstep", "30hz")


def speedups(links: dict) -> dict[str, dict[str, dict[str, float]]]:
    """Per link, mode (lockstep, 30 Hz) and peer: the peer's p50 over ours (``link.codec=auto``, the
    default) in the same mode. Like with like: an idle 30 Hz loop pays wake-ups a busy one does not."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for link, row in links.items():
        for mode in (*MODES, "30hz_spin"):  # ours spinning idle cores against the peers at 30 Hz
            ours = row.get(f"ours_auto_{mode}", {}).get("p50_ms")
            for peer in ("openpi", "lerobot"):
                theirs = row.get(f"{peer}_{mode.removesuffix('_spin')}", {}).get("p50_ms")
                if ours is not None and theirs is not None:
                    out.setdefault(link, {}).setdefault(mode, {})[peer] = theirs / ours
    return out


def loopback_raw_vs_openpi(loop: dict) -> dict[str, float]:
    """Per mode: our best raw-frame p50 on loopback (frame ring or in-band) over openpi's (target <= 0.8)."""
    out = {}
    for mode in MODES:
        ours = [
            loop[k]["p50_ms"]
            for k in (f"ours_raw_ring_{mode}", f"ours_raw_in_band_{mode}")
            if "p50_ms" in loop.get(k, {})
        ]
        if ours and "p50_ms" in loop.get(f"openpi_{mode}", {}):
            out[mode] = min(ours) / loop[f"openpi_{mode}"]["p50_ms"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="lockstep requests per peer and link")
    parser.add_argument("--links", default="loopback,10gbit,1gbit,100mbit")
    parser.add_argument(
        "--rounds", type=int, default=1, help="runs of every side per link, alternating; medians reported"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "link_compare.json")
    parser.add_argument("--ours", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ours:
        ours_in_this_process(args.ours[0], int(args.ours[1]), float(args.ours[2]), args.ours[3])
        return
    openpi = peer_python("openpi", OPENPI_PINS)
    lerobot = peer_python("lerobot", LEROBOT_PINS, tuple(LEROBOT_NO_DEPS))
    duration = args.requests / 30.0
    results: dict = {"payload": "2 x 640x480 RGB + float32[16] up, float32[50,7] down", "links": {}}
    if args.out.exists():  # re-measuring some links keeps the others' figures (each link is one run)
        results["links"] = json.loads(args.out.read_text()).get("links", {})
    for link in args.links.split(","):
        prefix, why_not = ([], "") if link == "loopback" else shaped_namespace(NAMESPACE, link)
        if why_not:
            print(f"{link}: skipped ({why_not})")
            results["links"][link] = {"skipped": why_not}
            continue
        runs = {
            "openpi_lockstep": partial(run_peer, "openpi", prefix, openpi, args.requests, 0.0),
            "openpi_30hz": partial(run_peer, "openpi", prefix, openpi, args.requests, 30.0),
            # openpi's own client against our server of its protocol (trainer/server/openpi_server.py).
            "openpi_client_ours_lockstep": partial(
                run_peer, "openpi", prefix, openpi, args.requests, 0.0, [*prefix, *OURS_OPENPI]
            ),
            "openpi_client_ours_30hz": partial(
                run_peer, "openpi", prefix, openpi, args.requests, 30.0, [*prefix, *OURS_OPENPI]
            ),
            "lerobot_lockstep": partial(run_peer, "lerobot", prefix, lerobot, args.requests, 0.0),
            "lerobot_30hz": partial(run_peer, "lerobot", prefix, lerobot, args.requests, 30.0),
        }
        for mode in MODES:
            lockstep = mode == "lockstep"
            runs[f"ours_raw_in_band_{mode}"] = partial(run_ours, prefix, "raw", 0, duration, lockstep)
            runs[f"ours_jpeg_{mode}"] = partial(run_ours, prefix, "jpeg", 0, duration, lockstep)
            # The default: on this host the frame ring; on a shaped link (another host) no ring.
            runs[f"ours_auto_{mode}"] = partial(
                run_ours, prefix, "auto", 0 if prefix else 16, duration, lockstep
            )
            if link == "loopback":
                runs[f"ours_raw_ring_{mode}"] = partial(run_ours, prefix, "raw", 16, duration, lockstep)
        # The agent with spin_idle_cores = true: its idle cores never halt (robot_agent/core_wake.py).
        runs["ours_auto_30hz_spin"] = partial(
            run_ours, prefix, "auto", 0 if prefix else 16, duration, cores="spin"
        )
        # Rounds of one run of each: a drift in this shared machine's speed lands on every side alike.
        rounds = [{name: run() for name, run in runs.items()} for _ in range(args.rounds)]
        if prefix:
            delete_namespace(NAMESPACE)
        row = {name: median_of_rounds([r[name] for r in rounds]) for name in runs}
        results["links"][link] = row
        for name, figures in row.items():
            if "failed" in figures:
                print(f"{link:9s} {name:22s} failed: {figures['failed']}", flush=True)
                continue
            print(f"{link:9s} {name:22s} p50 {figures['p50_ms']:7.2f} ms  p99 {figures['p99_ms']:7.2f} ms  "
                  f"late {figures['late_over_33ms']}  {figures.get('frames', '')}", flush=True)  # fmt: skip
    results["loopback_raw_vs_openpi"] = loopback_raw_vs_openpi(results["links"].get("loopback", {}))
    for mode, ratio in results["loopback_raw_vs_openpi"].items():
        print(f"loopback, {mode}: our raw p50 / openpi's = {ratio:.2f} (target <= 0.8)")
    results["speedups"] = speedups(results["links"])
    for link, by_mode in results["speedups"].items():
        wanted = TARGET_SPEEDUP.get(link)
        for mode, by_peer in by_mode.items():
            print(f"{link:9s} {mode:8s} ours (auto) vs the peers' p50: "
                  + ", ".join(f"{peer} {ratio:.2f}x" for peer, ratio in by_peer.items())
                  + (f" (target >= {wanted}x)" if wanted else ""))  # fmt: skip
    results["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
