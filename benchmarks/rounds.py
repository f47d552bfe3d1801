"""Interleaved rounds, shared by the placement benchmarks.

Every mode runs once per round, so a slow spell on a shared machine hits all modes alike; each
mode then reports its median round (whose time breakdown stays consistent with its rate).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm


def median_run(runs: list[dict]) -> dict:
    """The round with the median throughput (``steps_per_s``)."""
    return sorted(runs, key=lambda r: r["steps_per_s"])[len(runs) // 2]


def interleaved_rounds(
    repeats: int, modes: dict[str, Callable[[], dict]], partial: Path | None = None
) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """Run every mode once per round on one local Ray; (all rounds, the median round) per mode.

    Each run's rate is printed as it lands, and with ``partial`` the rounds so far are written
    there after every run, so a benchmark stopped midway keeps what it measured.
    """
    import ray

    runs: dict[str, list[dict]] = {mode: [] for mode in modes}
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        for round_index in tqdm(range(repeats), desc="rounds"):
            for mode, run in modes.items():
                runs[mode].append(run())
                tqdm.write(f"round {round_index + 1} {mode}: {runs[mode][-1]['steps_per_s']:.1f} env steps/s")
                if partial is not None:
                    partial.parent.mkdir(parents=True, exist_ok=True)
                    partial.write_text(json.dumps(runs, indent=2))
    finally:
        ray.shutdown()
    if partial is not None:
        partial.unlink(missing_ok=True)  # complete: the caller writes the full results
    return runs, {mode: median_run(mode_runs) for mode, mode_runs in runs.items()}
