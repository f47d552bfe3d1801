"""``benchmarks/sim_to_real.py`` refuses bad input in one line, before any training."""

from __future__ import annotations

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
        (
            ["--policy", "image", "--arms", "sim_nominal", "twin_only"],
            "--policy image runs the sim-only arms",
        ),
        (["--teachers-from", "runs/w", "--work", "runs/w", "--arms", "sim_dr"], "--teachers-from is --work"),
        (["--teachers-from", "runs/old", "--arms", "cotrain_scratch"], "not 'cotrain_scratch'"),
        (["--arms", "sim_nominal", "sim_real"], "unknown arm 'sim_real'"),
        (["--arms", "sim_nominal", "sim_calibrated"], "it goes with --policy image"),
        (["--policy", "image", "--arms", "cotrain_scratch"], "not 'cotrain_scratch'"),
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


def test_a_robot_weight_that_is_not_positive_is_refused(tmp_path):
    result = run("--robot-weight", "0", "--out", str(tmp_path / "out.json"), cwd=tmp_path)
    assert result.returncode == 2 and "--robot-weight must be > 0, got 0" in result.stderr
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
