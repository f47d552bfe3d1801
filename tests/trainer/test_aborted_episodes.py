"""Aborted episodes (a robot that dropped) and source weights, as the algorithms consume them."""

from __future__ import annotations

import copy

import numpy as np
import torch

import sim_envs
from policies import PolicyConfig, make_policy
from trainer.algorithms.common import collect_on_policy
from trainer.algorithms.ppo import PPO, PPOConfig
from trainer.algorithms.sac import SAC, SACConfig

GARBAGE = 1000.0


class DroppingEnv:
    """Two sim envs; env 1 stands in for a robot (source weight 2) that drops at decision ``drop_at``.

    After the drop its ticks are invalid and carry garbage rewards, which must not matter.
    """

    source_weights = np.array([1.0, 2.0], np.float32)

    def __init__(self, drop_at: int, horizon: int = 4) -> None:
        self.sim = sim_envs.make_vector(
            "rlinf/FrankaReach-v0",
            2,
            backend="inline",
            cameras=[],
            action_rotation=False,
            max_episode_steps=horizon,
        )
        self.spec, self.num_envs, self.drop_at, self.decision = self.sim.spec, 2, drop_at, 0

    def reset(self, seed=None, seeds=None):
        self.decision = 0
        return self.sim.reset(seed=seed, seeds=seeds)

    def chunk_step(self, actions):
        result = self.sim.chunk_step(actions)
        if self.decision == self.drop_at:
            result.aborted = [1]
        if self.decision >= self.drop_at:
            result.valid[1] = False
            result.rewards[1] = GARBAGE
            result.terminated[1] = result.truncated[1] = False
            result.finished = [e for e in result.finished if e.env_index != 1]
        self.decision += 1
        return result

    def close(self):
        self.sim.close()


def ppo_policy(spec):
    torch.manual_seed(0)
    return make_policy(spec, PolicyConfig(hidden_sizes=[32]))


def test_an_aborted_episode_gets_zero_weight_back_to_its_start():
    env = DroppingEnv(drop_at=5, horizon=4)
    policy = ppo_policy(env.spec)
    batch = collect_on_policy(env, policy, seed=0, num_steps=8, cameras=[])
    weights = batch.weights.numpy()
    assert (weights[:, 0] == 1.0).all()
    assert (weights[:4, 1] == 2.0).all()  # the finished first episode keeps the robot's source weight
    assert (weights[4:, 1] == 0.0).all()  # the episode cut at decision 5 is dropped from its start (4)
    assert batch.env_steps == 8 + 5  # the invalid ticks are not counted


def _update(batch, policy):
    torch.manual_seed(1)
    ppo = PPO(copy.deepcopy(policy), PPOConfig(update_epochs=2, num_minibatches=2))
    ppo.update(batch)
    return torch.cat([p.detach().flatten() for p in ppo.policy.parameters()])


def test_ppo_ignores_everything_in_an_aborted_episode():
    env = DroppingEnv(drop_at=5, horizon=4)
    policy = ppo_policy(env.spec)
    batch = collect_on_policy(env, policy, seed=0, num_steps=8, cameras=[])
    tampered = copy.deepcopy(batch)
    tampered.rewards[4:, 1] = -GARBAGE  # change what happened in the aborted episode...
    tampered.samples[4:, 1] = 0.9
    tampered.log_probs[4:, 1] = -50.0
    torch.testing.assert_close(_update(batch, policy), _update(tampered, policy))  # ...and nothing moves
    # Without the weights the same tampering changes the update: the check above can fail.
    batch.weights = tampered.weights = None
    assert not torch.allclose(_update(batch, policy), _update(tampered, policy))


def test_sac_drops_an_aborted_episode_from_its_replay_buffer():
    env = DroppingEnv(drop_at=5, horizon=8)
    torch.manual_seed(0)
    policy = make_policy(env.spec, PolicyConfig(head="tanh_gaussian", value_head=False, hidden_sizes=[32]))
    sac = SAC(policy, SACConfig(learning_starts=10_000, buffer_capacity=64))
    result = sac.iterate(env, seed=0)
    assert result.env_steps == 8 + 5
    usable = sac.buffer.data["usable"][: len(sac.buffer)]
    assert len(sac.buffer) == 13 and usable.sum() == 8  # env 1's five steps before the drop are out
    assert GARBAGE not in sac.buffer.data["reward"]
    env.close()
