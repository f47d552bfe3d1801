"""``benchmarks/vla.py`` reuses its recorded demos only when the recording finished (a dataset that
a killed run left with fewer episodes than asked for is recorded again, not trained on), and runs
RL from the SFT starts kept beside the recorded results."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

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
    made_by = bench.kept_start_made_by(folder, head, TASK, "privileged", 4)
    assert f"{made_by['state']}{made_by['demos']}_c{made_by['chunk']}" in start  # as its folder is named
    assert f"_{made_by['sft_updates']}x{made_by['sft_lr']:g}_seed{made_by['seed']}" in start
    dart = f"_dart{made_by['demo_noise']:g}_"  # a start from DART demos is named for their noise
    assert (dart in start) == (made_by["demo_noise"] > 0)
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


def refusal(bench, monkeypatch, capsys, *argv: str) -> str:
    monkeypatch.setattr(sys, "argv", ["vla.py", *argv])
    with pytest.raises(SystemExit) as exit_info:
        bench.main()
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_a_kept_start_made_for_another_state_or_without_a_record_is_refused(tmp_path, monkeypatch, capsys):
    bench = load_benchmark()
    start = SFT_STARTS / "pi05_privileged300_c4_8000x0.001_seed0"
    err = refusal(
        bench, monkeypatch, capsys, "--heads", "pi05", "--state", "objects", "--sft-start", str(start)
    )
    assert "made for state 'privileged', this run asks for 'objects'" in err
    err = refusal(
        bench, monkeypatch, capsys, "--heads", "pi0", "--state", "privileged", "--sft-start", str(start)
    )
    assert "made for head 'pi05', this run asks for 'pi0'" in err
    (tmp_path / "sft.json").write_text(json.dumps({"losses": [1.0], "seconds": 1.0}))  # kept before made_by
    err = refusal(bench, monkeypatch, capsys, "--heads", "pi05", "--sft-start", str(tmp_path))
    assert "does not say how it was made" in err


def test_a_trained_start_records_how_it_was_made(tmp_path):
    bench = load_benchmark()
    env_kwargs = {**bench.ENV, **bench.STATES["privileged"]}
    demos = bench.demo_dataset(str(tmp_path), TASK, "privileged", 1, 0.0, env_kwargs)
    env = bench.sim_envs.make_vector(TASK, 1, backend="inline", **env_kwargs)
    made_by = {"head": "pi05", "task": TASK, "state": "privileged", "demos": 1, "demo_noise": 0.0, "chunk": 4,
               "sft_updates": 2, "sft_lr": 1e-3, "seed": 0}  # fmt: skip
    try:
        bench.sft("pi05", env.spec, demos, 2, 1e-3, 4, 0, None, tmp_path / "start", made_by)
    finally:
        env.close()
    assert bench.kept_start_made_by(tmp_path / "start", "pi05", TASK, "privileged", 4) == made_by
    with pytest.raises(ValueError, match="made for chunk 4, this run asks for 8"):
        bench.kept_start_made_by(tmp_path / "start", "pi05", TASK, "privileged", 8)


@pytest.mark.parametrize("anneal", [False, True])
def test_anneal_lr_lowers_every_step_size_together_over_the_budget(monkeypatch, anneal):
    bench = load_benchmark()
    seen: list[list[float]] = []

    class Recording:  # stands in for GRPO: one parameter group per policy and value, as PPO has
        def __init__(self, policy, config):
            params = [torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))]
            self.optimizer = torch.optim.Adam(
                [{"params": params[:1]}, {"params": params[1:], "lr": 2 * config.learning_rate}],
                lr=config.learning_rate,
            )

        def iterate(self, venv, seed):
            seen.append([group["lr"] for group in self.optimizer.param_groups])
            time.sleep(0.05)
            return SimpleNamespace(metrics={"collect_s": 0.0}, env_steps=1, finished=[])

    monkeypatch.setattr(bench, "GRPO", Recording)
    monkeypatch.setattr(bench, "evaluate", lambda *args: {})
    monkeypatch.setattr(bench, "flow_scores", lambda *args: {})
    bench.rl("grpo", None, None, None, "pi05", 0.02, 1, 0, learning_rate=1e-4, anneal_lr=anneal)
    first, last = seen[0], seen[-1]
    assert len(seen) > 5 and first == pytest.approx([1e-4, 2e-4], rel=0.05)
    if anneal:  # both groups fall together, each iteration lower, the last one below half
        assert all(b[0] < a[0] and b[1] < a[1] for a, b in itertools.pairwise(seen))
        assert last[0] < 5e-5 and last[1] == pytest.approx(2 * last[0])
    else:
        assert all(lrs == [1e-4, 2e-4] for lrs in seen)
