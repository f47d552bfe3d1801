"""What the suite tests (MetaWorld, ManiSkill) share: the checks run in a suite's own venv, and PPO's
gain over an untrained policy on fixed seeds, both through that venv's workers."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import sim_envs
from policies import load_policy, make_policy
from trainer.algorithms.common import play_greedy
from trainer.checkpoint import latest_checkpoint
from trainer.configs import load_config
from trainer.runner import Runner

ROOT = Path(__file__).resolve().parents[2]


def suite_python(suite: str) -> str:
    """The interpreter of ``.venv-<suite>``; the test skips, saying how to build it, where it is missing."""
    python = ROOT / f".venv-{suite}" / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"no {suite} venv: bash scripts/sim_venv.sh {suite} (CI builds it)")
    return str(python)


def run_suite_checks(python: str, env_id: str, kwargs: dict, camera: str, *flags: str) -> dict:
    """tests/sim_envs/suite_checks.py in the suite's venv: its findings."""
    result = subprocess.run(
        [python, str(ROOT / "tests" / "sim_envs" / "suite_checks.py"), env_id, json.dumps(kwargs), camera, *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "MUJOCO_GL": "egl"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, lines[:5]  # the findings alone: our envs print nothing on stdout
    return json.loads(lines[0])


def ppo_returns_before_and_after(
    preset: str, python: str, kwargs: dict, steps: int, run_dir: Path, seed: int
) -> tuple[float, float]:
    """Train ``preset`` for ``steps`` env steps in the suite's workers; the greedy mean return of an
    untrained policy and of the trained one, on the same seeded episodes."""
    overrides = [
        f"env.python={python}", "env.num_envs=8", "env.num_workers=2", f"run.total_env_steps={steps}",
        "run.eval_every=0", "run.final_eval_episodes=0", f"run.output_dir={run_dir}",
        f"env.kwargs={json.dumps(kwargs)}",
    ]  # fmt: skip
    config = load_config(preset, overrides)
    Runner(config).run()
    venv = sim_envs.make_vector(
        config.env.id, 8, backend="subprocess", num_workers=2, python=python, **kwargs
    )
    try:
        untrained = make_policy(venv.spec, config.policy)
        trained = load_policy(latest_checkpoint(run_dir) / "policy")
        before = np.mean([e.episode_return for e in play_greedy(venv, untrained, seed)[1]])
        after = np.mean([e.episode_return for e in play_greedy(venv, trained, seed)[1]])
    finally:
        venv.close()
    return float(before), float(after)
