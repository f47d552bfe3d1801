"""Run outputs: ``metrics.jsonl`` (one line per iteration), TensorBoard events, a progress bar."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tqdm import tqdm

METRICS_FILE = "metrics.jsonl"


class RunLogger:
    """Writes each iteration's metrics to JSONL and TensorBoard and updates the progress bar."""

    def __init__(self, run_dir: Path, total_env_steps: int, start_env_steps: int, desc: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = run_dir
        self.metrics_path = run_dir / METRICS_FILE
        self.writer = SummaryWriter(str(run_dir / "tensorboard"))
        self.bar = tqdm(
            total=total_env_steps, initial=start_env_steps, desc=desc, unit="step", dynamic_ncols=True
        )

    def log(self, metrics: dict[str, Any]) -> None:
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(metrics) + "\n")
            f.flush()
        step = metrics["env_steps"]
        for key, value in metrics.items():
            if (
                isinstance(value, (int, float))
                and key not in ("iteration", "env_steps")
                and math.isfinite(value)
            ):
                self.writer.add_scalar(key.replace(".", "/"), value, step)
        self.writer.flush()
        self.bar.update(max(0, min(step, self.bar.total or step) - self.bar.n))  # never past the total
        postfix = {
            "success": metrics.get("success_rate"),
            "return": metrics.get("return_mean"),
            "steps/s": metrics.get("steps_per_s"),
        }
        self.bar.set_postfix(
            {k: f"{v:.2f}" if isinstance(v, float) else v for k, v in postfix.items() if v is not None}
        )

    def close(self) -> None:
        self.bar.close()
        self.writer.close()


def truncate_metrics(run_dir: Path, last_iteration: int) -> None:
    """Drop lines after ``last_iteration`` (work after the checkpoint that a resume redoes)."""
    path = run_dir / METRICS_FILE
    if not path.exists():
        return
    kept = [
        line
        for line in path.read_text().splitlines()
        if line and json.loads(line)["iteration"] <= last_iteration
    ]
    path.write_text("".join(line + "\n" for line in kept))
