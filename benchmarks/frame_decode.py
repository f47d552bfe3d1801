"""Trainer-side frame decode under fan-in: libjpeg-turbo CPU threads against nvJPEG on the GPU.

Many robots sending JPEG at 30 Hz cost the trainer CPU it needs for the env pool and the learner.
This measures ``trainer.server.frame_decoder`` as serve uses it: one call per observation (two
640x480 frames of the rendered MuJoCo scene with sensor noise, JPEG q90, as ``link_latency.py``
sends), from ``--callers`` threads at once (robots' observations arrive together). Per decoder:
  * one caller: ms per observation (p50 / p99);
  * fan-in: observations/s over ``--seconds``, the trainer process's CPU-ms per observation, and how
    many 30 Hz robots that rate serves.
Every decoder runs once per round and reports its median round (``--rounds``), so a slow spell on a
shared machine hits all alike. Where no GPU is there, the GPU row says why and the CPU rows still run.

    python benchmarks/frame_decode.py [--callers 8] [--seconds 5] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from protos import link_codec  # noqa: E402
from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space  # noqa: E402
from trainer.server.frame_decoder import (  # noqa: E402
    CpuFrameDecoder,
    FrameDecoder,
    gpu_decode_unavailable,
    make_frame_decoder,
)

HEIGHT, WIDTH, CONTROL_HZ, QUALITY = 480, 640, 30.0, 90


def scene_frames(frames_file: Path | None, sensor_noise: float) -> dict[str, np.ndarray]:
    """The two cameras' frames: from ``--frames`` (an .npz this script saved) or rendered now."""
    if frames_file is not None:
        with np.load(frames_file) as saved:
            return {name: saved[name] for name in saved.files}
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from link_latency import render_scene_frames

    return render_scene_frames(sensor_noise)


def spec_for(frames: dict[str, np.ndarray]) -> EnvSpec:
    cameras = tuple(CameraSpec(name, *image.shape[:2], CONTROL_HZ) for name, image in frames.items())
    return EnvSpec("frame-decode", cameras, (StateField("state", 16),), ee_delta_action_space(),
                   CONTROL_HZ, "", 300)  # fmt: skip


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def one_caller(decoder: FrameDecoder, wire, spec: EnvSpec, repeats: int) -> dict[str, float]:
    for _ in range(5):  # warm: thread pool, CUDA context, nvJPEG handles
        decoder.decode(wire, spec)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        decoder.decode(wire, spec)
        samples.append((time.perf_counter() - start) * 1e3)
    return {"p50_ms": float(np.percentile(samples, 50)), "p99_ms": float(np.percentile(samples, 99))}


def fan_in(decoder: FrameDecoder, wire, spec: EnvSpec, callers: int, seconds: float) -> dict[str, float]:
    """``callers`` threads decode back to back for ``seconds``: the rate and the CPU it cost."""
    counts = [0] * callers
    stop = threading.Event()

    def run(index: int) -> None:
        while not stop.is_set():
            decoder.decode(wire, spec)
            counts[index] += 1

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(callers)]
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    observations = sum(counts)
    rate = observations / wall
    return {
        "observations_per_s": rate,
        "frames_per_s": rate * len(wire),
        "cpu_ms_per_observation": 1e3 * cpu / max(observations, 1),
        "cpu_cores_busy": cpu / wall,
        "robots_at_30hz": rate / CONTROL_HZ,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--callers", type=int, default=8, help="threads decoding at once (robots arriving together)"
    )
    parser.add_argument("--cpu-threads", type=int, default=4, help="the CPU decoder's pool (serve's default)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=200, help="single-caller observations timed")
    parser.add_argument("--sensor-noise", type=float, default=6.0)
    parser.add_argument(
        "--frames", type=Path, help="an .npz of frames (from --save-frames) instead of rendering"
    )
    parser.add_argument("--save-frames", type=Path, help="write the rendered frames here and exit")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "frame_decode.json")
    args = parser.parse_args()
    if args.callers < 1 or args.rounds < 1 or args.seconds <= 0:
        parser.error("--callers and --rounds must be >= 1 and --seconds > 0")

    frames = scene_frames(args.frames, args.sensor_noise)
    if args.save_frames is not None:
        np.savez(args.save_frames, **frames)
        print(f"saved {sorted(frames)} to {args.save_frames}")
        return
    spec = spec_for(frames)
    wire = [link_codec.encode_frame(name, image, "jpeg", QUALITY) for name, image in frames.items()]
    kb = [len(frame.data) / 1024 for frame in wire]
    print(f"{len(wire)} x {HEIGHT}x{WIDTH} JPEG q{QUALITY}: {np.mean(kb):.0f} KB per frame; "
          f"{os.cpu_count()} CPUs; {args.callers} callers")  # fmt: skip

    why_no_gpu = gpu_decode_unavailable()
    builders = {"cpu": lambda: CpuFrameDecoder(args.cpu_threads)}
    if why_no_gpu is None:
        builders["cuda"] = lambda: make_frame_decoder("cuda")
    decoders = {name: build() for name, build in builders.items()}
    rounds: dict[str, list[dict]] = {name: [] for name in decoders}
    try:
        latency = {name: one_caller(d, wire, spec, args.repeats) for name, d in decoders.items()}
        for index in range(args.rounds):
            for name, decoder in decoders.items():
                result = fan_in(decoder, wire, spec, args.callers, args.seconds)
                rounds[name].append(result)
                print(f"round {index + 1} {name:4s}: {result['observations_per_s']:7.0f} obs/s, "
                      f"{result['cpu_ms_per_observation']:.2f} CPU-ms/obs, "
                      f"{result['cpu_cores_busy']:.1f} cores busy", flush=True)  # fmt: skip
    finally:
        for decoder in decoders.values():
            decoder.close()

    medians = {
        name: sorted(runs, key=lambda r: r["observations_per_s"])[len(runs) // 2]
        for name, runs in rounds.items()
    }
    report = {
        "payload": f"{len(wire)} x {HEIGHT}x{WIDTH} JPEG q{QUALITY}, {np.mean(kb):.0f} KB per frame",
        "callers": args.callers,
        "cpu_threads": args.cpu_threads,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "single_caller": latency,
        "fan_in_median_round": medians,
        "rounds": rounds,
        "gpu": why_no_gpu or "used",
    }
    if "cuda" in medians:
        import torch

        report["machine"]["gpu"] = torch.cuda.get_device_name(0)
        report["gpu_vs_cpu"] = {
            "throughput": medians["cuda"]["observations_per_s"] / medians["cpu"]["observations_per_s"],
            "cpu_per_observation": medians["cuda"]["cpu_ms_per_observation"]
            / medians["cpu"]["cpu_ms_per_observation"],
        }
    print(json.dumps({k: report[k] for k in ("single_caller", "fan_in_median_round", "gpu")}, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
