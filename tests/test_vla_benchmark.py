"""``benchmarks/vla.py`` reuses its recorded demos only when the recording finished: a dataset that
a killed run left with fewer episodes than asked for is recorded again, not trained on."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "vla.py"
TASK = "rlinf/FrankaPickColor-v0"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("vla_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def episodes_in(path: Path) -> int:
    return int(json.loads((path / "meta" / "info.json").read_text())["total_episodes"])


def test_an_interrupted_demo_recording_is_recorded_again(tmp_path):
    bench = load_benchmark()
    first = bench.demo_dataset(str(tmp_path), TASK, "privileged", 1, 0.0, {"privileged_state": True})
    assert episodes_in(first) == 1
    # A run asking for 2 demos finds a folder of that name holding 1: what a killed recording leaves.
    partial = tmp_path / "demos_FrankaPickColor-v0_privileged_2"
    first.rename(partial)
    path = bench.demo_dataset(str(tmp_path), TASK, "privileged", 2, 0.0, {"privileged_state": True})
    assert path == partial
    assert episodes_in(path) == 2
    mtime = (path / "meta" / "info.json").stat().st_mtime_ns
    # A complete recording is reused as it is.
    assert bench.demo_dataset(str(tmp_path), TASK, "privileged", 2, 0.0, {"privileged_state": True}) == path
    assert (path / "meta" / "info.json").stat().st_mtime_ns == mtime
