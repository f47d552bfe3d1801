"""IsaacLab behind the batched env contract, through a CPU stand-in with the surface of IsaacLab's
envs (tests/sim_envs/isaaclab_standin.py): tensors in and out, auto-reset inside the step, one seed
for the batch; PPO through the runner; one-line errors where Isaac Sim is missing."""

from __future__ import annotations

import json

import numpy as np
import pytest

import sim_envs
from protos import ContractError
from trainer.configs import load_config
from trainer.runner import Runner

STANDIN = {"factory": "tests.sim_envs.isaaclab_standin:make", "success_term": "goal_reached", "device": "cpu"}


def make(n: int = 6):
    return sim_envs.make_vector("rlinf/IsaacLab-v0", n, task="PointMass", **STANDIN)


def drive_to_goal(obs) -> np.ndarray:
    return np.clip(10 * obs["state"][:, 2:4], -1, 1)[:, None, :]


def test_the_spec_comes_from_the_batched_env_and_seeds_reproduce_the_batch():
    venv, again = make(), make()
    spec = venv.spec
    assert spec.name == "rlinf/IsaacLab-v0" and spec.state_dim == 4 and spec.max_episode_steps == 30
    assert spec.action.low == (-1.0, -1.0) and spec.action.high == (1.0, 1.0)  # unbounded -> +-action_bound
    assert spec.control_hz == pytest.approx(20.0) and spec.instruction == "PointMass"
    obs, _ = venv.reset(seed=4)
    same, _ = again.reset(seed=4)
    other, _ = again.reset(seed=5)
    np.testing.assert_array_equal(obs["state"], same["state"])
    assert not np.allclose(obs["state"], other["state"]) and obs["state"].dtype == np.float32


def test_chunks_play_as_tensors_clipped_to_the_bounds_and_episodes_end_with_success():
    venv = make()
    obs, _ = venv.reset(seed=0)
    result = venv.chunk_step(np.full((6, 2, 2), 5.0, np.float32))
    sent = venv.env.actions_seen[-1]
    assert sent.dtype.is_floating_point and float(sent.max()) == 1.0  # clipped before the GPU
    assert result.rewards.shape == (6, 2) and result.valid.all()
    finished = []
    obs = result.obs
    for _ in range(40):
        result = venv.chunk_step(np.repeat(drive_to_goal(obs), 3, axis=1))
        finished += result.finished
        # After an env's episode ends mid-chunk, the rest of its chunk is masked.
        for i in np.flatnonzero(result.done):
            end = int(np.flatnonzero(result.terminated[i] | result.truncated[i])[0])
            assert not result.valid[i, end + 1 :].any()
        obs = result.obs
    assert len(finished) >= 6 and all(e.success and e.length <= 30 for e in finished)
    assert all(final is None for final in result.final_obs)  # IsaacLab never returns the last obs


def test_per_env_seeds_and_bad_actions_are_refused():
    venv = make(4)
    with pytest.raises(ContractError, match="seeds its whole batch with one seed"):
        venv.reset(seeds=[0, 0, 1, 1])
    venv.reset(seeds=[3, 4, 5, 6])  # what plain ``seed=3`` means: accepted
    with pytest.raises(ContractError, match="NaN"):
        venv.chunk_step(np.full((4, 1, 2), np.nan, np.float32))
    with pytest.raises(ContractError, match=r"actions expected \[4, chunk, 2\]"):
        venv.chunk_step(np.zeros((4, 2), np.float32))


@pytest.mark.slow
def test_ppo_through_the_runner_learns_on_the_batched_env(tmp_path):
    overrides = [
        f"env.kwargs={json.dumps({**STANDIN, 'task': 'PointMass'})}", "env.num_envs=16", "run.device=cpu",
        "run.total_env_steps=20000", f"run.output_dir={tmp_path}", "run.final_eval_episodes=8",
        "policy.hidden_sizes=[64, 64]",
    ]  # fmt: skip
    Runner(load_config("ppo_isaaclab", overrides)).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    first = np.mean([r["success_rate"] for r in rows[:3]])
    last = np.mean([r["success_rate"] for r in rows[-3:]])
    assert last > first + 0.3, (first, last)
    final = json.loads((tmp_path / "final_eval.json").read_text())
    assert final["episodes"] == 8 and final["success_rate"] >= 0.5, final


def test_without_isaac_sim_the_error_names_the_extra_and_a_single_env_is_refused():
    with pytest.raises(ValueError, match=r"needs IsaacLab and Isaac Sim \(the isaaclab extra"):
        sim_envs.make_vector("rlinf/IsaacLab-v0", 2)
    with pytest.raises(ValueError, match=r"is batched .*make_vector"):
        sim_envs.make("rlinf/IsaacLab-v0")
