"""PPO's critic options: the value head's own learning rate, and a value loss without the clip."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

import sim_envs
from policies import PolicyConfig, make_policy
from trainer.algorithms.common import collect_on_policy, decisions_per_episode
from trainer.algorithms.ppo import PPO, PPOConfig


def reach(num_envs: int = 4):
    return sim_envs.make_vector("rlinf/FrankaReach-v0", num_envs, backend="inline", cameras=[],
                                action_rotation=False, max_episode_steps=8)  # fmt: skip


def test_the_value_head_steps_at_its_own_learning_rate_and_the_rest_at_the_policys():
    venv = reach()
    torch.manual_seed(0)
    policy = make_policy(venv.spec, PolicyConfig(hidden_sizes=[32]))
    critic = policy.value_parameters()
    assert critic and all(p is q for p, q in zip(critic, policy.critic.parameters(), strict=True))
    ppo = PPO(policy, PPOConfig(learning_rate=1e-4, value_learning_rate=3e-3))
    actor_group, critic_group = ppo.optimizer.param_groups
    assert critic_group["lr"] == 3e-3 and actor_group["lr"] == 1e-4
    assert {id(p) for p in critic_group["params"]} == {id(p) for p in critic}
    everything = {id(p) for p in policy.parameters()}
    assert {id(p) for p in actor_group["params"]} == everything - {id(p) for p in critic}
    # Without the option: one group, as optimizer states saved before it had.
    single = PPO(policy, PPOConfig())
    assert len(single.optimizer.param_groups) == 1
    with pytest.raises(ValueError, match=r"algo\.value_learning_rate"):
        ppo.load_state_dict(single.state_dict())  # a resume with the option changed: one line
    ppo.load_state_dict(PPO(policy, PPOConfig(value_learning_rate=1e-3)).state_dict())
    venv.close()


def value_move_after_updates(clip_value_loss: bool, updates: int = 10) -> tuple[float, float]:
    """PPO updates on one batch whose rewards are scaled to the tens (a success reward per step):
    the mean |V - V_rollout| the critic moved, and the mean episode return."""
    venv = reach()
    torch.manual_seed(0)
    policy = make_policy(venv.spec, PolicyConfig(hidden_sizes=[32]))
    batch = collect_on_policy(venv, policy, 0, decisions_per_episode(venv, policy), [])
    batch = dataclasses.replace(batch, rewards=torch.full_like(batch.rewards, 10.0))
    venv.close()
    ppo = PPO(
        copy.deepcopy(policy),
        PPOConfig(value_learning_rate=1e-2, clip_value_loss=clip_value_loss, critic_warmup_updates=1,
                  update_epochs=4, num_minibatches=2),
    )  # fmt: skip
    for _ in range(updates):
        ppo.update(batch)
    obs = batch.flat_obs()
    with torch.no_grad():
        moved = (ppo.policy.value(obs) - batch.values.flatten()).abs().mean()
    return float(moved), float(batch.rewards.sum(0).mean())


def test_an_unclipped_value_loss_lets_the_critic_reach_returns_in_the_tens():
    clipped, scale = value_move_after_updates(clip_value_loss=True)
    unclipped, _ = value_move_after_updates(clip_value_loss=False)
    assert scale > 10  # the returns are far from a fresh critic's values
    assert clipped < 1.5  # the clip holds the values near the rollout's (clip_coef 0.2, plus drift)
    assert unclipped > 5 * clipped  # without it the critic keeps going towards the returns
