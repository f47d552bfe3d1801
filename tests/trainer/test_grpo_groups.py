"""What a GRPO group contributes: advantages with and without the group's std (Dr. GRPO), and
groups whose returns are all equal left out of the update (``algo.drop_uniform_groups``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import sim_envs
from policies import PolicyConfig, make_policy
from trainer.algorithms.common import collect_on_policy, decisions_per_episode
from trainer.algorithms.grpo import GRPO, GRPOConfig

GROUP = 4
# three groups' episode returns: all equal, one rollout ahead, all different
RETURNS = [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 4.0], [0.0, 10.0, 20.0, 30.0]]


def batch_with_returns(policy, returns: list[list[float]]):
    """A real batch of one episode per env, its rewards replaced so each env's return is ``returns``."""
    envs = sum(len(group) for group in returns)
    venv = sim_envs.make_vector("rlinf/FrankaReach-v0", envs, backend="inline", cameras=[],
                                action_rotation=False, max_episode_steps=8)  # fmt: skip
    seeds = GRPO.reset_seeds(GRPOConfig(group_size=GROUP), 0, envs)
    batch = collect_on_policy(venv, policy, 0, decisions_per_episode(venv, policy), [], seeds=seeds)
    venv.close()
    rewards = torch.zeros_like(batch.rewards)
    rewards[-1] = torch.tensor([r for group in returns for r in group])  # all of it on the last decision
    return dataclasses.replace(batch, rewards=rewards)


def reach_policy():
    torch.manual_seed(0)
    spec = sim_envs.make_vector(
        "rlinf/FrankaReach-v0", 1, backend="inline", cameras=[], action_rotation=False
    ).spec
    return make_policy(spec, PolicyConfig(hidden_sizes=[32], chunk_size=2, normalize_state=False))


def test_advantages_are_divided_by_the_groups_std_unless_told_not_to():
    policy = reach_policy()
    batch = batch_with_returns(policy, RETURNS)
    scaled, _ = GRPO(policy, GRPOConfig(group_size=GROUP)).group_advantages(batch, 3)
    raw, _ = GRPO(policy, GRPOConfig(group_size=GROUP, scale_by_group_std=False)).group_advantages(batch, 3)
    torch.testing.assert_close(raw[4:8], torch.tensor([-1.0, -1.0, -1.0, 3.0]))  # R - mean
    torch.testing.assert_close(scaled[4:8], torch.tensor([-0.5, -0.5, -0.5, 1.5]), atol=1e-5, rtol=0)
    # with the std, the one-rollout-ahead group weighs as much as the spread-out one; without, 10x less
    assert abs(scaled[7] / scaled[11]) > 1.0 and abs(raw[7] / raw[11]) < 0.25
    torch.testing.assert_close(raw[:4], torch.zeros(4))  # a uniform group gives nothing either way


def test_uniform_groups_are_left_out_of_every_minibatch():
    policy = reach_policy()
    batch = batch_with_returns(policy, RETURNS)
    decisions = batch.rewards.shape[0]
    seen: list[int] = []
    evaluate = policy.evaluate

    def counting(obs, samples):
        seen.append(samples.shape[0])
        return evaluate(obs, samples)

    policy.evaluate = counting
    cfg = GRPOConfig(group_size=GROUP, update_epochs=2, num_minibatches=2)
    metrics = GRPO(policy, dataclasses.replace(cfg, drop_uniform_groups=True)).update(batch)
    assert sum(seen) == 2 * decisions * 8  # two epochs over the two informative groups' decisions
    assert metrics["informative_groups"] == pytest.approx(2 / 3)
    seen.clear()
    GRPO(policy, cfg).update(batch)
    assert sum(seen) == 2 * decisions * 12  # kept, the uniform group's decisions are trained on at 0


def test_a_batch_of_only_uniform_groups_leaves_the_policy_as_it_was():
    policy = reach_policy()
    batch = batch_with_returns(policy, [[1.0] * GROUP, [0.0] * GROUP])
    before = [p.detach().clone() for p in policy.parameters()]
    metrics = GRPO(policy, GRPOConfig(group_size=GROUP, drop_uniform_groups=True)).update(batch)
    assert metrics["informative_groups"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
