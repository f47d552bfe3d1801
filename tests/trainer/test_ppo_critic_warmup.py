"""PPO's critic warmup: a policy started from SFT/BC keeps its actor while its fresh critic learns."""

from __future__ import annotations

import torch

import sim_envs
from policies import PolicyConfig, make_policy
from trainer.algorithms.ppo import PPO, PPOConfig


def actor_and_critic(policy) -> tuple[dict, dict]:
    state = {k: v.clone() for k, v in policy.state_dict().items()}
    actor = {k: v for k, v in state.items() if k.startswith(("actor.", "mean_head.", "log_std"))}
    return actor, {k: v for k, v in state.items() if k.startswith("critic.")}


def test_the_first_updates_move_the_critic_only_then_both():
    venv = sim_envs.make_vector("rlinf/FrankaReach-v0", 4, backend="inline", cameras=[],
                                action_rotation=False, max_episode_steps=8)  # fmt: skip
    torch.manual_seed(0)
    policy = make_policy(venv.spec, PolicyConfig(hidden_sizes=[32]))
    ppo = PPO(policy, PPOConfig(critic_warmup_updates=2, update_epochs=2, num_minibatches=2))
    actor_0, critic_0 = actor_and_critic(policy)
    assert actor_0 and critic_0
    for seed in range(2):
        ppo.iterate(venv, seed)
    actor_2, critic_2 = actor_and_critic(policy)
    assert all(torch.equal(actor_0[k], actor_2[k]) for k in actor_0)  # the actor is where it started
    assert any(not torch.equal(critic_0[k], critic_2[k]) for k in critic_0)  # the critic learned
    ppo.iterate(venv, 2)
    actor_3, _ = actor_and_critic(policy)
    assert any(not torch.equal(actor_2[k], actor_3[k]) for k in actor_2)  # warmup over: the actor moves
    resumed = PPO(policy, PPOConfig(critic_warmup_updates=2))
    resumed.load_state_dict(ppo.state_dict())
    assert resumed.updates_done == 3  # a resumed run does not warm up again
    venv.close()
