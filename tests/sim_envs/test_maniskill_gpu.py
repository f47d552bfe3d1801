"""ManiSkill3 on SAPIEN's GPU physics (``rlinf/ManiSkillGPU-v0``): the batched contract with envs
whose episodes end at different steps of a chunk, and PPO through the runner learning PushCube.
Marked ``gpu``: needs a CUDA GPU and ManiSkill in this venv (``pip install -e .[maniskill]``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.sim_envs.maniskill_gpu_checks import HORIZON, findings
from trainer.configs import load_config
from trainer.runner import Runner

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_a_batch_on_the_gpu_resets_only_the_envs_whose_episodes_ended():
    n = 8
    found = findings(n, "physx_cuda")
    assert found["spec"]["name"] == "rlinf/ManiSkillGPU-v0" and found["state_shape"] == [n, 35]
    assert found["same_seed_same_state"] and found["other_seed_other_state"]
    # The first half started 2 steps late: their episodes end 2 steps after the rest's.
    early, late = HORIZON - 3, HORIZON - 1
    assert found["ends"] == [late] * (n // 2) + [early] * (n - n // 2)
    assert not any(found["valid_after_end"]) and found["finished"] == list(range(n))
    assert all(found["final_obs_given"]) and all(found["final_differs_from_new_start"])
    assert found["elapsed_after"] == [1] * (n // 2) + [3] * (n - n // 2)
    assert found["nan_refused"] and found["group_seeds_refused"]


def test_ppo_on_the_gpu_batch_learns_push_cube(tmp_path):
    overrides = [
        "env.num_envs=256", "run.total_env_steps=400000", f"run.output_dir={tmp_path}", "run.eval_every=0",
        "run.final_eval_episodes=64", "run.seed=1",
    ]  # fmt: skip
    config = load_config("ppo_maniskill_gpu", overrides)
    Runner(config).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    returns = [r["return_mean"] for r in rows if "return_mean" in r]
    assert np.mean(returns[-3:]) > np.mean(returns[:3]) + 2.0, (returns[:3], returns[-3:])
    final = json.loads((tmp_path / "final_eval.json").read_text())
    assert final["success_rate"] > 0.2, final
