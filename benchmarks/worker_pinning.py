"""Vector-env workers pinned to cores of their own against unpinned ones, on our own Franka task.

``SimVectorEnv`` with subprocess workers (``train``'s default backend) steps ``--envs`` copies of
``--task`` with random one-step chunks, with 1 worker and with as many workers as this process has
cores, each pinned (``pin_workers=True``: a free core each, ``sim_envs/core_claims.py``) and
unpinned; with state only and with one 128 px camera. Every path is built first and then timed in
rounds of one run each, so a drift in this shared machine's speed lands on all of them; medians of
the rounds and, per worker count, pinned over unpinned.

    python benchmarks/worker_pinning.py [--task rlinf/FrankaPickLift-v0] [--envs 32] [--steps 16000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import sim_envs
from protos.atomic_files import write_atomic
from sim_envs.core_claims import CLAIMS_DIR_ENV, allowed_cores

RESULTS = Path(__file__).resolve().parent / "results"


class PathRuns:
    """One vector env, built, reset and warmed up once; each run goes on from where the last left off."""

    def __init__(self, task: str, envs: int, steps: int, workers: int, pin: bool, camera: bool) -> None:
        kwargs = {"cameras": ["front"] if camera else [], "image_height": 128, "image_width": 128}
        os.environ[CLAIMS_DIR_ENV] = tempfile.mkdtemp(prefix="rlinf-bench-claims-")  # a path's own claims
        self.venv = sim_envs.make_vector(task, envs, backend="subprocess", num_workers=workers,
                                         pin_workers=pin, **kwargs)  # fmt: skip
        spec = self.venv.spec.action
        rng = np.random.default_rng(0)
        self.actions = rng.uniform(spec.low, spec.high, (steps // envs, envs, 1, spec.dim)).astype(np.float32)
        self.venv.reset(seed=0)
        for chunk in self.actions[:5]:
            self.venv.chunk_step(chunk)

    def run_once(self) -> float:
        start = time.perf_counter()
        for chunk in self.actions:
            self.venv.chunk_step(chunk)
        return self.actions.shape[0] * self.actions.shape[1] / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="rlinf/FrankaPickLift-v0")
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--steps", type=int, default=16000, help="env steps per run, state only")
    parser.add_argument("--camera-steps", type=int, default=640, help="env steps per run with a camera")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(RESULTS / "worker_pinning.json"))
    args = parser.parse_args()
    cores = len(allowed_cores())
    worker_counts = sorted({1, cores})
    results: dict = {"benchmark": "worker_pinning", "settings": vars(args),
                     "machine": {"cores": cores, "python": platform.python_version()}}  # fmt: skip
    for camera in (False, True):
        steps = args.camera_steps if camera else args.steps
        paths = {
            f"{workers}_workers_{'pinned' if pin else 'unpinned'}": PathRuns(
                args.task, args.envs, steps, workers, pin, camera
            )
            for workers in worker_counts
            for pin in (True, False)
        }
        rates: dict[str, list[float]] = {name: [] for name in paths}
        try:
            for _ in range(args.repeats):
                for name, runs in paths.items():
                    rates[name].append(runs.run_once())
        finally:
            for runs in paths.values():
                runs.venv.close()
        medians = {name: statistics.median(r) for name, r in rates.items()}
        row = {
            **{f"{name}_steps_per_s": round(m, 1) for name, m in medians.items()},
            **{f"{w}_workers_pinned_over_unpinned": round(
                medians[f"{w}_workers_pinned"] / medians[f"{w}_workers_unpinned"], 3) for w in worker_counts},
            "runs": rates,
        }  # fmt: skip
        results["camera_128" if camera else "state"] = row
        for w in worker_counts:
            print(f"{'camera' if camera else 'state':7} {w} worker(s): pinned {medians[f'{w}_workers_pinned']:8.1f}"
                  f"  unpinned {medians[f'{w}_workers_unpinned']:8.1f} steps/s"
                  f"  ratio {row[f'{w}_workers_pinned_over_unpinned']:.2f}", flush=True)  # fmt: skip
    write_atomic(Path(args.out), json.dumps(results, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
