"""``learning_curve.png`` beside a run's ``metrics.jsonl``: success and return against env steps and
wall time, for the training envs, the greedy evaluations and each source of a mixed run (the sim,
each robot).

Drawn from the metrics file alone, so it can be redrawn for any run: ``python -m
trainer.learning_curve RUN_DIR``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from protos.atomic_files import write_atomic

CURVE_FILE = "learning_curve.png"
# What each panel row shows: (title, the key of the training envs' figure, the eval key, the per-source suffix).
ROWS = (
    ("success rate", "success_rate", "eval/success_rate", "/success_rate"),
    ("return", "return_mean", "eval/return_mean", "/return_mean"),
)


def read_metrics(path: Path) -> list[dict]:
    """The rows of ``metrics.jsonl``; a line cut short by a killed process is left out."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def series(rows: list[dict], key: str, x_key: str) -> tuple[list[float], list[float]]:
    points = [
        (row[x_key], row[key]) for row in rows if isinstance(row.get(key), (int, float)) and x_key in row
    ]
    return [p[0] for p in points], [p[1] for p in points]


def curve_lines(rows: list[dict], train_key: str, eval_key: str, suffix: str) -> dict[str, str]:
    """Label -> metrics key of every line in one panel: training envs, greedy eval, each source."""
    lines = {"training envs": train_key, "greedy eval": eval_key}
    sources = sorted({k for row in rows for k in row if k.startswith("source/") and k.endswith(suffix)})
    lines.update({key[len("source/") : -len(suffix)]: key for key in sources})
    return {label: key for label, key in lines.items() if any(key in row for row in rows)}


def plot_learning_curve(run_dir: str | Path) -> Path | None:
    """Draw ``run_dir/learning_curve.png`` from its metrics (None when there are none yet)."""
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    rows = read_metrics(metrics) if metrics.is_file() else []
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")  # files only: no screen needed
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(ROWS), 2, figsize=(11, 3.4 * len(ROWS)), squeeze=False)
    for row_axes, (title, train_key, eval_key, suffix) in zip(axes, ROWS):
        for axis, (x_key, x_label) in zip(
            row_axes, (("env_steps", "env steps"), ("wall_s", "wall time (s)"))
        ):
            for label, key in curve_lines(rows, train_key, eval_key, suffix).items():
                xs, ys = series(rows, key, x_key)
                axis.plot(xs, ys, marker="o" if len(xs) < 3 else None, markersize=3, label=label)
            axis.set_xlabel(x_label)
            axis.set_ylabel(title)
            axis.grid(alpha=0.3)
            if title == "success rate":
                axis.set_ylim(-0.03, 1.03)
        row_axes[0].legend(fontsize=8, loc="best")
    figure.suptitle(
        f"{run_dir.name}: {rows[-1].get('env_steps', 0)} env steps, iteration {rows[-1].get('iteration', 0)}"
    )
    figure.tight_layout()
    target = run_dir / CURVE_FILE
    write_atomic(target, lambda tmp: figure.savefig(tmp, dpi=90, format="png"))
    plt.close(figure)
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m trainer.learning_curve RUN_DIR", file=sys.stderr)
        return 2
    path = plot_learning_curve(args[0])
    if path is None:
        print(f"error: {args[0]} has no metrics.jsonl rows to draw", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
