"""``benchmarks/sim_to_real.py`` refuses bad input in one line, before any training, and its arms that
learn on the twins give configs the trainer loads, with the cameras the twins stream."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "sim_to_real.py"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--teachers-from", "runs/w", "--work", "runs/w", "--arms", "sim_dr"], "--teachers-from is --work"),
        (["--teachers-from", "runs/old", "--arms", "cotrain_scratch"], "not 'cotrain_scratch'"),
        (["--arms", "sim_nominal", "sim_real"], "unknown arm 'sim_real'"),
        (["--arms", "sim_nominal", "sim_calibrated"], "it goes with --policy image"),
        (["--policy", "image", "--arms", "cotrain_finetune"], "seed 0 has none: run sim_nominal first"),
        (["--arms", "cotrain_finetune", "sim_nominal"], "seed 0 has none: run sim_nominal first"),
    ],
)
def test_bad_arguments_are_one_line_before_any_training(tmp_path, args, message):
    result = run(*args, "--out", str(tmp_path / "out.json"), cwd=tmp_path)
    assert result.returncode == 2
    err = result.stderr.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("flag", "message"),
    [("--robot-weight", "--robot-weight must be > 0, got 0"), ("--cotrain-sim-envs", "must be >= 1, got 0")],
)
def test_a_co_training_mix_without_robots_or_sims_is_refused(tmp_path, flag, message):
    result = run(flag, "0", "--out", str(tmp_path / "out.json"), cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "out.json").exists()


def test_a_gap_file_with_an_unknown_key_is_one_line(tmp_path):
    gap = tmp_path / "gap.json"
    gap.write_text(json.dumps({"friction_scale": [0.5, 0.5], "gravity_scale": [2.0, 2.0]}))
    result = run("--gap", str(gap), "--out", str(tmp_path / "out.json"), cwd=tmp_path)
    assert result.returncode == 2
    err = result.stderr.strip()
    assert err.startswith(f"sim_to_real: --gap {gap}") and "gravity_scale" in err and "\n" not in err


def test_a_reevaluation_that_replaces_figures_says_why(tmp_path):
    out = tmp_path / "out.json"
    out.write_text(json.dumps({"runs": [], "settings": {}, "gap": {}}))
    before = out.read_text()
    result = run("--reevaluate", "--out", str(out), cwd=tmp_path)
    assert result.returncode == 2
    err = result.stderr.strip()
    assert "say why with --why" in err and "\n" not in err
    assert out.read_text() == before


def test_every_gap_profile_loads_and_reality_gap_json_is_the_default_gap():
    from dataclasses import asdict

    from sim_envs.randomization import REALITY_GAP, DomainRandomization

    gaps = sorted((SCRIPT.parent / "gaps").glob("*.json"))
    assert len(gaps) >= 7
    loaded = {path.stem: DomainRandomization.from_any(json.loads(path.read_text())) for path in gaps}
    assert asdict(loaded["reality_gap"]) == asdict(REALITY_GAP)
    # camera_mount.json is the default gap with the cameras mounted off their nominal pose
    mount = asdict(loaded["camera_mount"])
    assert set(mount.pop("camera_mount_offset")) == {"front", "wrist"}
    default = asdict(REALITY_GAP)
    del default["camera_mount_offset"]
    assert mount == default


def load_script():
    spec = importlib.util.spec_from_file_location("sim_to_real_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("arm", ["cotrain_scratch", "cotrain_finetune", "twin_only"])
@pytest.mark.parametrize("policy", ["state", "image"])
def test_online_arms_load_with_the_cameras_the_twins_stream(arm, policy):
    from trainer.configs.loader import load_config

    bench = load_script()
    noise = ["policy.init_log_std=-1.0"]
    plan = bench.online_arm(arm, policy, bench.SIM_KWARGS, bench.STUDENT_KWARGS, noise)
    cfg = load_config(plan.config, list(plan.overrides))
    assert cfg.algorithm == ("rlpd" if arm == "twin_only" else "ppo")
    twin = bench.Twin(gap={}, action_scale={}, previous_action=False, cameras=plan.cameras)
    driver = twin.driver_section()
    # the policy reads exactly the cameras the twins stream, at the size they stream them
    assert tuple(cfg.policy.cameras) == tuple(cfg.env.kwargs["cameras"]) == tuple(driver["cameras"])
    if policy == "image":
        assert plan.cameras == ("front", "wrist") and cfg.policy.kind == "cnn"
        assert cfg.env.kwargs["image_height"] == cfg.env.kwargs["image_width"] == driver["image_size"]
        assert cfg.env.kwargs["privileged_state"] is False and driver["privileged_state"] is False
    else:
        assert plan.cameras == () and cfg.env.kwargs["privileged_state"] is True
    if arm == "twin_only":
        assert cfg.env.num_envs == 1 and cfg.algo["demo_episodes"] == 0
    else:  # finetuning takes small steps from the student; from scratch, the preset's own rate
        assert cfg.env.num_envs == 16
        fewer = bench.online_arm(arm, policy, bench.SIM_KWARGS, bench.STUDENT_KWARGS, noise, sim_envs=4)
        assert load_config(fewer.config, list(fewer.overrides)).env.num_envs == 4
        small_steps = arm == "cotrain_finetune" and policy == "image"
        assert (cfg.algo.get("learning_rate") == 1.0e-4) == small_steps
        assert (cfg.policy.init_log_std == -1.0) == (policy == "state")


def test_a_sim_only_arm_has_no_online_plan():
    bench = load_script()
    with pytest.raises(bench.BenchmarkError, match="trains in the sim alone"):
        bench.online_arm("sim_dr", "state", bench.SIM_KWARGS, bench.STUDENT_KWARGS, [])
