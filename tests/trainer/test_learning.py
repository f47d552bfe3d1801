"""Each algorithm learns on a small real MuJoCo task, against a fixed-seed random baseline.

A baseline is the mean return of uniformly random actions on the evaluation seeds; the trained
policy's greedy return must beat it by a clear margin. Budgets are kept to a minute or two on CPU.
"""

import numpy as np
import pytest

import sim_envs
from policies import load_policy
from trainer.checkpoint import latest_checkpoint
from trainer.configs import load_config
from trainer.evaluation import evaluate_policy
from trainer.runner import Runner

EVAL_SEED = 10_000


def random_baseline(env_id: str, kwargs: dict, episodes: int = 8) -> float:
    env = sim_envs.make(env_id, **kwargs)
    rng = np.random.default_rng(0)
    returns = []
    for episode in range(episodes):
        env.reset(seed=EVAL_SEED + episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(
                rng.uniform(-1, 1, env.env_spec.action.dim).astype(np.float32)
            )
            total += reward
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def train_and_evaluate(tmp_path, preset: str, overrides: list[str]) -> tuple[dict, float]:
    config = load_config(
        preset,
        [
            f"run.output_dir={tmp_path}",
            "run.eval_every=0",
            "run.checkpoint_every=1000",
            "run.final_eval_episodes=0",
            *overrides,
        ],
    )
    Runner(config).run()
    policy = load_policy(latest_checkpoint(tmp_path) / "policy")
    kwargs = dict(config.env.kwargs)
    stats = evaluate_policy(policy, config.env.id, kwargs, episodes=8, seed=EVAL_SEED)
    return stats, random_baseline(config.env.id, kwargs)


@pytest.mark.slow
def test_ppo_learns_to_reach(tmp_path):
    stats, baseline = train_and_evaluate(
        tmp_path, "ppo_reach", ["env.num_envs=8", "env.backend=inline", "run.total_env_steps=8000"]
    )
    assert stats["eval_return_mean"] > baseline + 15, (stats, baseline)


@pytest.mark.slow
def test_grpo_learns_to_reach(tmp_path):
    stats, baseline = train_and_evaluate(
        tmp_path, "grpo_reach", ["env.num_envs=16", "env.backend=inline", "run.total_env_steps=12000"]
    )
    assert stats["eval_return_mean"] > baseline + 8, (stats, baseline)


SAC_NETS = ["policy.hidden_sizes=[128,128]", "algo.critic_hidden=[128,128]", "run.torch_threads=2"]


@pytest.mark.slow
def test_sac_learns_to_reach(tmp_path):
    stats, baseline = train_and_evaluate(
        tmp_path,
        "sac_reach",
        [
            "run.total_env_steps=4000",
            "algo.learning_starts=800",
            *SAC_NETS,
        ],
    )
    assert stats["eval_return_mean"] > baseline + 15, (stats, baseline)


@pytest.mark.slow
def test_rlpd_learns_to_reach_from_demos(tmp_path):
    stats, baseline = train_and_evaluate(
        tmp_path,
        "sac_reach",
        [
            "algorithm=rlpd",
            "run.total_env_steps=1600",
            "algo.demo_episodes=8",
            "algo.learning_starts=0",
            "algo.utd_ratio=1.0",
            *SAC_NETS,
        ],
    )
    assert stats["eval_return_mean"] > baseline + 15, (stats, baseline)


@pytest.mark.slow
def test_sac_learns_to_reach_on_ray_with_the_asynchronous_learner(tmp_path, local_ray):
    stats, baseline = train_and_evaluate(
        tmp_path,
        "sac_reach",
        [
            "run.total_env_steps=4800",
            "algo.learning_starts=800",
            "cluster.placement=disaggregated",
            *SAC_NETS,
        ],
    )
    assert stats["eval_return_mean"] > baseline + 15, (stats, baseline)


@pytest.mark.slow
def test_ppo_learns_pick_lift_on_the_ur5e(tmp_path):
    """The embedded default's preset on the other arm: the same PPO moves a UR5e to the cube
    (random actions score 0.05 there; 12k steps score about 9)."""
    stats, baseline = train_and_evaluate(
        tmp_path,
        "ppo_pick_lift",
        ["env.id=rlinf/UR5ePickLift-v0", "env.num_envs=8", "env.backend=inline", "run.total_env_steps=12000"],
    )
    assert stats["eval_return_mean"] > baseline + 5, (stats, baseline)
