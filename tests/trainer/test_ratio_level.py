"""Token-level policy ratios (``algo.ratio_level=token``, RLinf's ``logprob_type=token_level``) and the
clip-higher upper bound (``algo.clip_coef_high``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import sim_envs
from policies import PolicyConfig, make_policy
from trainer.algorithms.common import clipped_surrogate_loss, collect_on_policy, decisions_per_episode
from trainer.algorithms.grpo import GRPO, GRPOConfig
from trainer.algorithms.ppo import PPO, PPOConfig


def reach(num_envs: int = 4):
    return sim_envs.make_vector("rlinf/FrankaReach-v0", num_envs, backend="inline", cameras=[],
                                action_rotation=False, max_episode_steps=8)  # fmt: skip


def surrogate_gradient(ratio: list, advantage: list, clip_high: float = 0.0) -> torch.Tensor:
    ratio_ = torch.tensor(ratio, requires_grad=True)
    clipped_surrogate_loss(torch.tensor(advantage), ratio_, 0.2, clip_high=clip_high).backward()
    return ratio_.grad


def test_each_term_is_clipped_on_its_own_and_clip_higher_widens_only_the_upper_bound():
    # one decision, three terms: one inside the range, one past 1 + clip, one under 1 - clip
    grad = surrogate_gradient([[1.1, 1.3, 0.7]], [1.0])
    assert grad[0, 0] != 0 and grad[0, 1] == 0 and grad[0, 2] != 0  # a positive advantage: only the top clips
    grad = surrogate_gradient([[1.1, 1.3, 0.7]], [-1.0])
    assert grad[0, 0] != 0 and grad[0, 1] != 0 and grad[0, 2] == 0  # a negative one: only the bottom
    # the decision's summed ratio would have clipped all three together: 1.1 * 1.3 * 0.7 is inside, but
    # 1.1 * 1.3 is not
    assert torch.all(surrogate_gradient([[1.1 * 1.3]], [1.0]) == 0)
    # clip-higher: 1.25 passes an upper bound of 1.28, not one of 1.2; the lower bound stays 0.8
    assert surrogate_gradient([1.25], [1.0], clip_high=0.28)[0] != 0
    assert surrogate_gradient([1.25], [1.0])[0] == 0
    assert surrogate_gradient([0.75], [-1.0], clip_high=0.28)[0] == 0


def test_the_batch_keeps_each_decisions_log_prob_terms_and_they_sum_to_its_log_prob():
    venv = reach()
    torch.manual_seed(0)
    # without the running state normaliser, which moves while the batch is collected
    policy = make_policy(venv.spec, PolicyConfig(hidden_sizes=[32], chunk_size=2, normalize_state=False))
    batch = collect_on_policy(venv, policy, 0, decisions_per_episode(venv, policy), [])
    venv.close()
    steps, envs = batch.log_probs.shape
    assert batch.log_prob_terms.shape == (steps, envs, 2 * venv.spec.action.dim)
    torch.testing.assert_close(batch.log_prob_terms.sum(-1), batch.log_probs)
    evaluation = policy.evaluate(batch.flat_obs(), batch.samples.flatten(0, 1))
    torch.testing.assert_close(evaluation.log_prob_terms, batch.log_prob_terms.flatten(0, 1))


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_a_token_level_update_trains_and_reports_its_clip_and_kl_per_term(algorithm):
    venv = reach()
    torch.manual_seed(0)
    policy = make_policy(venv.spec, PolicyConfig(hidden_sizes=[32], chunk_size=2))
    if algorithm == "ppo":
        learner = PPO(policy, PPOConfig(learning_rate=3e-2, ratio_level="token", update_epochs=4))
    else:
        learner = GRPO(policy, GRPOConfig(group_size=2, learning_rate=3e-2, ratio_level="token"))
    batch = collect_on_policy(venv, policy, 0, decisions_per_episode(venv, policy), [],
                              seeds=[0, 0, 1, 1])  # fmt: skip
    venv.close()
    before = [p.detach().clone() for p in policy.parameters()]
    metrics = learner.update(batch)
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    assert metrics["approx_kl"] > 0
    if algorithm == "ppo":
        assert 0 < metrics["clip_frac"] < 1  # per term: a fraction, not all-or-nothing per decision


def test_a_bad_ratio_level_or_a_policy_without_terms_is_one_line():
    venv = reach()
    policy = make_policy(venv.spec, PolicyConfig(hidden_sizes=[32]))
    with pytest.raises(
        ValueError, match=r"algo\.ratio_level must be one of \['chunk', 'token'\], got 'step'"
    ):
        PPO(policy, PPOConfig(ratio_level="step"))
    with pytest.raises(ValueError, match=r"algo\.ratio_level"):
        GRPO(policy, GRPOConfig(ratio_level="action"))
    batch = collect_on_policy(venv, policy, 0, decisions_per_episode(venv, policy), [])
    venv.close()
    without = dataclasses.replace(batch, log_prob_terms=None)
    with pytest.raises(
        ValueError, match=r"ratio_level=token needs a policy whose act\(\) returns log_prob_terms"
    ):
        PPO(policy, PPOConfig(ratio_level="token")).update(without)
    PPO(policy, PPOConfig(ratio_level="chunk")).update(without)  # the summed log-prob needs no terms
