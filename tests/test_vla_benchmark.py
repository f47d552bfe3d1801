"""``benchmarks/vla.py`` reuses its recorded demos only when the recording finished (a dataset that
a killed run left with fewer episodes than asked for is recorded again, not trained on), and runs
RL from the SFT starts kept beside the recorded results."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "vla.py"
TASK = "rlinf/FrankaPickColor-v0"
SFT_STARTS = SCRIPT.parent / "results" / "sft_starts"


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


@pytest.mark.parametrize("start", sorted(p.name for p in SFT_STARTS.iterdir()))
def test_a_kept_sft_start_loads_whole_into_its_family(start):
    bench = load_benchmark()
    folder = SFT_STARTS / start
    head = start.split("_")[0]
    env = bench.sim_envs.make_vector(TASK, 1, backend="inline", **{**bench.ENV, **bench.STATES["privileged"]})
    try:
        policy, regression, losses, _ = bench.sft(head, env.spec, None, 1, 1e-3, 4, 0, None, folder)
    finally:
        env.close()
    assert regression is None and losses == json.loads((folder / "sft.json").read_text())["losses"]
    kept, loaded = load_file(str(folder / "model.safetensors")), policy.state_dict()
    assert set(kept) == set(loaded)
    for key, tensor in kept.items():
        assert torch.equal(loaded[key], tensor), key


def test_a_missing_sft_start_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    bench = load_benchmark()
    work = tmp_path / "work"
    argv = ["vla.py", "--heads", "pi05", "--sft-start", str(tmp_path), "--work", str(work)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        bench.main()
    assert exit_info.value.code == 2
    assert f"--sft-start {tmp_path}: no sft.json there" in capsys.readouterr().err
    assert not work.exists()  # no demos recorded
