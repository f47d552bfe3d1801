"""MetaWorld behind the env contract (``rlinf/MetaWorld-v0``), stepped in its own venv's workers:
the env checker and reset rules there, the vector contract and PPO from the main venv through
``env.python``, and one-line refusals where MetaWorld cannot run."""

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
from trainer.cli import main as trainer_main
from trainer.configs import load_config
from trainer.runner import Runner

ROOT = Path(__file__).resolve().parents[2]
SIDE_PYTHON = ROOT / ".venv-metaworld" / "bin" / "python"


@pytest.fixture(scope="module")
def side_python() -> str:
    if not SIDE_PYTHON.is_file():
        pytest.skip("no MetaWorld venv: bash scripts/sim_venv.sh metaworld (CI builds it)")
    return str(SIDE_PYTHON)


def run_suite_checks(python: str, env_id: str, kwargs: dict, camera: str, *flags: str) -> dict:
    """tests/sim_envs/suite_checks.py in the suite's venv: its findings."""
    result = subprocess.run(
        [python, str(ROOT / "tests" / "sim_envs" / "suite_checks.py"), env_id, json.dumps(kwargs), camera, *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "MUJOCO_GL": "egl"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_env_checker_passes_and_seeds_fix_the_variation_in_metaworlds_venv(side_python):
    kwargs = {"task": "reach-v3", "cameras": ["corner"], "image_size": 48, "max_episode_steps": 80}
    found = run_suite_checks(side_python, "rlinf/MetaWorld-v0", kwargs, "corner", "--reach")
    spec = found["spec"]
    assert spec["name"] == "rlinf/MetaWorld-v0" and spec["instruction"] == "reach"
    assert sum(f["size"] for f in spec["state_fields"]) == 39 and spec["action"]["kind"] == "box"
    assert found["same_seed_same_state"] and found["same_seed_same_frame"]
    assert found["other_seed_other_state"]  # another seed draws another of the 50 variations
    assert found["image"] == [48, 48, 3] and found["image_std"] > 5  # a rendered scene, not a blank
    assert found["steps_to_end"] == 80 and found["ended_by"] == "truncated"
    assert found["controller_success"]  # info["success"] comes through when the hand reaches the goal


def test_the_vector_contract_holds_with_workers_in_metaworlds_venv(side_python):
    make = lambda: sim_envs.make_vector(  # noqa: E731
        "rlinf/MetaWorld-v0", 4, backend="subprocess", num_workers=2, python=side_python,
        task="push-v3", max_episode_steps=10,
    )  # fmt: skip
    venv, again = make(), make()
    try:
        assert venv.spec.name == "rlinf/MetaWorld-v0" and venv.spec.state_dim == 39
        assert venv.spec.instruction == "push"
        obs, _ = venv.reset(seed=3)
        same, _ = again.reset(seed=3)
        np.testing.assert_array_equal(obs["state"], same["state"])
        assert obs["state"].shape == (4, 39) and obs["instruction"] == ["push"] * 4
        result = venv.chunk_step(np.zeros((4, 12, 4), np.float32))
        assert result.truncated.any(axis=1).all() and len(result.finished) == 4
        assert all(e.length == 10 for e in result.finished)
        assert result.final_obs is not None  # the ended episodes' last observations are kept
    finally:
        venv.close()
        again.close()


def test_ppo_in_metaworld_beats_the_untrained_policy_on_fixed_seeds(side_python, tmp_path):
    overrides = [
        f"env.python={side_python}", "env.num_envs=8", "env.num_workers=2", "run.total_env_steps=24000",
        "run.eval_every=0", "run.final_eval_episodes=0", f"run.output_dir={tmp_path}",
        "env.kwargs={task: reach-v3, max_episode_steps: 100}",
    ]  # fmt: skip
    config = load_config("ppo_metaworld", overrides)
    runner = Runner(config)
    runner.run()
    venv = sim_envs.make_vector(
        "rlinf/MetaWorld-v0", 16, backend="subprocess", num_workers=2, python=side_python,
        task="reach-v3", max_episode_steps=100,
    )  # fmt: skip
    try:
        untrained = make_policy(venv.spec, config.policy)
        trained = load_policy(latest_checkpoint(tmp_path) / "policy")
        before = np.mean([e.episode_return for e in play_greedy(venv, untrained, 777)[1]])
        after = np.mean([e.episode_return for e in play_greedy(venv, trained, 777)[1]])
    finally:
        venv.close()
    assert after > 1.5 * before, (before, after)


def test_metaworld_in_the_main_venv_names_its_own_venv():
    with pytest.raises(ValueError, match=r"scripts/sim_venv.sh metaworld.*env.python"):
        sim_envs.make("rlinf/MetaWorld-v0")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["env.python=/no/such/python"], "worker interpreter '/no/such/python' is not an executable"),
        (["env.backend=inline"], "needs backend='subprocess'"),
        (["cluster.placement=collocated"], "env.python applies to sequential runs"),
    ],
)
def test_bad_worker_interpreters_are_one_line_errors(overrides, message, capsys, tmp_path):
    code = trainer_main(["train", "--config", "ppo_metaworld", f"run.output_dir={tmp_path}", *overrides])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
