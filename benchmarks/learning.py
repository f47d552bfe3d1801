"""Learning benchmark: success rate against wall time and env steps, per preset, on this machine.

Each run trains a preset under a wall-clock budget (``run.max_wall_minutes``), then reads its
``metrics.jsonl``. It reports the first wall time and env step count at which the training success
rate (mean over the last 3 iterations) reached the target, the final figures, and draws the curves.

    python benchmarks/learning.py                                   # PPO pick-lift, 30 min budget
    python benchmarks/learning.py --runs ppo_reach ppo_push --minutes 10
    python benchmarks/learning.py --runs sac_reach_image --minutes 60 --set run.torch_threads=2
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from trainer.configs import load_config
from trainer.runner import Runner

RESULTS = Path(__file__).with_name("results")


def smoothed(values: list[float], window: int = 3) -> np.ndarray:
    values = np.nan_to_num(np.asarray(values, dtype=float), nan=0.0)
    return np.array([values[max(0, i - window + 1) : i + 1].mean() for i in range(len(values))])


def summarise(rows: list[dict], target: float) -> dict:
    success = smoothed([r["success_rate"] for r in rows])
    reached = np.flatnonzero(success >= target)
    first = int(reached[0]) if len(reached) else None
    evals = [r for r in rows if "eval/success_rate" in r]
    return {
        "iterations": len(rows),
        "env_steps": rows[-1]["env_steps"],
        "wall_s": rows[-1]["wall_s"],
        "env_steps_per_s": rows[-1]["env_steps"] / max(rows[-1]["wall_s"], 1e-9),
        "final_success_rate": float(success[-1]),
        "final_return_mean": float(rows[-1]["return_mean"]),
        "best_success_rate": float(success.max()),
        "target": target,
        "wall_s_to_target": rows[first]["wall_s"] if first is not None else None,
        "env_steps_to_target": rows[first]["env_steps"] if first is not None else None,
        "last_eval_success_rate": evals[-1]["eval/success_rate"] if evals else None,
    }


def plot(curves: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_time, by_steps) = plt.subplots(1, 2, figsize=(11, 4))
    for name, rows in curves.items():
        success = smoothed([r["success_rate"] for r in rows])
        by_time.plot([r["wall_s"] / 60 for r in rows], success, label=name)
        by_steps.plot([r["env_steps"] for r in rows], success, label=name)
    for ax, label in ((by_time, "wall time (min)"), (by_steps, "env steps")):
        ax.set_xlabel(label)
        ax.set_ylabel("training success rate (3-iter mean)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.axhline(0.9, color="grey", lw=0.8, ls="--")
    by_time.legend()
    fig.suptitle(f"rlinf learning on {platform.node()} ({platform.processor() or platform.machine()})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", nargs="+", default=["ppo_pick_lift"], help="presets from trainer/configs/")
    parser.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget per run")
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--set", nargs="*", default=[], help="extra key=value overrides for every run")
    parser.add_argument("--out", type=Path, default=RESULTS / "learning.json")
    args = parser.parse_args()

    stamp = time.strftime("%Y%m%d-%H%M%S")
    results, curves = {}, {}
    for preset in args.runs:
        run_dir = RESULTS / "runs" / f"{preset}-{stamp}"
        overrides = [
            f"run.output_dir={run_dir}",
            f"run.max_wall_minutes={args.minutes}",
            "run.total_env_steps=1000000000",
            "run.video=false",
            *args.set,
        ]
        Runner(load_config(preset, overrides)).run()
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        curves[preset] = rows
        results[preset] = summarise(rows, args.target)
        r = results[preset]
        to_target = (
            f"{r['wall_s_to_target'] / 60:.1f} min / {r['env_steps_to_target']} steps"
            if r["wall_s_to_target"]
            else "not reached"
        )
        print(
            f"{preset}: final success {r['final_success_rate']:.2f} (best {r['best_success_rate']:.2f}), "
            f"{r['env_steps']} steps in {r['wall_s'] / 60:.1f} min ({r['env_steps_per_s']:.0f} steps/s); "
            f">= {args.target:.0%}: {to_target}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"benchmark": "learning", "minutes": args.minutes, "results": results}, indent=2)
    )
    png = args.out.with_suffix(".png")
    plot(curves, png)
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
