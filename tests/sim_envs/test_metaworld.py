"""MetaWorld behind the env contract (``rlinf/MetaWorld-v0``), stepped in its own venv's workers:
the env checker and reset rules there, the vector contract and PPO from the main venv through
``env.python``, BC on the demos MetaWorld's own scripted policies record, and one-line refusals
where MetaWorld cannot run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import sim_envs
from policies import make_policy
from protos.lerobot_reader import read_episodes, read_tasks
from tests.sim_envs.suite_helpers import ppo_returns_before_and_after, run_suite_checks, suite_python
from trainer.algorithms.common import play_greedy
from trainer.cli import main as trainer_main
from trainer.configs import load_config
from trainer.runner import FINAL_EVAL_SEED, Runner


@pytest.fixture(scope="module")
def side_python() -> str:
    return suite_python("metaworld")


@pytest.mark.slow
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


@pytest.mark.slow
def test_ppo_in_metaworld_beats_the_untrained_policy_on_fixed_seeds(side_python, tmp_path):
    kwargs = {"task": "reach-v3", "max_episode_steps": 100}
    before, after = ppo_returns_before_and_after("ppo_metaworld", side_python, kwargs, 12000, tmp_path, 777)
    assert after > 1.5 * before, (before, after)


@pytest.mark.slow
def test_bc_on_metaworlds_own_scripted_demos_pushes_on_held_out_seeds(side_python, tmp_path):
    # MetaWorld's scripted policies record the demos (in its venv); BC trains in the main venv.
    kwargs = {"task": "push-v3", "max_episode_steps": 100, "terminate_on_success": True}
    demos = tmp_path / "demos"
    args = ["--env", "rlinf/MetaWorld-v0", "--env-kwargs", json.dumps(kwargs), "--episodes", "16"]
    assert trainer_main(["demos", *args, "--out", str(demos), "--python", side_python]) == 0
    episodes = read_episodes(demos)
    assert len(episodes) == 16 and episodes["success"].all()
    assert set(read_tasks(demos).values()) == {"push"}

    overrides = [
        "algorithm=bc", f"algo.dataset={demos}", "policy.value_head=false", "env.num_envs=8",
        f"env.python={side_python}", f"env.kwargs={json.dumps(kwargs)}", "run.total_env_steps=2400",
        "run.eval_every=0", "run.final_eval_episodes=16", "run.video=false", f"run.output_dir={tmp_path / 'bc'}",
    ]  # fmt: skip
    config = load_config("ppo_metaworld", overrides)
    Runner(config).run()
    trained = json.loads((tmp_path / "bc" / "final_eval.json").read_text())["success_rate"]
    # The same policy class untrained, on the same held-out seeds.
    venv = sim_envs.make_vector(
        "rlinf/MetaWorld-v0", 16, backend="subprocess", num_workers=2, python=side_python, **kwargs
    )
    try:
        torch.manual_seed(0)
        untrained = make_policy(venv.spec, config.policy)
        first = {e.env_index: e for e in reversed(play_greedy(venv, untrained, FINAL_EVAL_SEED)[1])}
    finally:
        venv.close()
    baseline = float(np.mean([e.success for e in first.values()]))
    assert trained >= baseline + 0.5, (baseline, trained)  # measured: 0.00 -> 0.94


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


def test_demos_in_a_missing_interpreter_are_a_one_line_error(capsys, tmp_path):
    code = trainer_main(
        ["demos", "--env", "rlinf/MetaWorld-v0", "--out", str(tmp_path), "--python", "/no/such/python"]
    )
    err = capsys.readouterr().err
    assert (
        code == 2 and "--python '/no/such/python' is not an executable" in err and len(err.splitlines()) == 1
    )
