"""A CPU stand-in with the surface of IsaacLab's ``ManagerBasedRLEnv`` that
:class:`sim_envs.adapters.isaaclab.IsaacLabVectorEnv` uses: batched torch tensors, an unbounded
action space, auto-reset inside ``step``, one seed for the batch and a termination manager.

The task: N point masses in 2-D, each pushed by its action towards its own goal; the episode ends on
reaching it (the ``goal_reached`` term) or at ``max_episode_length``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch


class _Terminations:
    def __init__(self) -> None:
        self.terms: dict[str, torch.Tensor] = {}

    def get_term(self, name: str) -> torch.Tensor:
        return self.terms[name]


class PointMassLabEnv:
    """``num_envs`` point masses stepped together, like an IsaacLab direct/manager-based env."""

    def __init__(self, num_envs: int, device: str = "cpu", max_episode_length: int = 30) -> None:
        self.num_envs, self.device = num_envs, torch.device(device)
        self.step_dt = 0.05
        self.max_episode_length = max_episode_length
        self.single_action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.termination_manager = _Terminations()
        self.generator = torch.Generator().manual_seed(0)
        self.position = torch.zeros(num_envs, 2)
        self.goal = torch.zeros(num_envs, 2)
        self.steps = torch.zeros(num_envs, dtype=torch.long)
        self.actions_seen: list[torch.Tensor] = []

    @property
    def unwrapped(self) -> PointMassLabEnv:
        return self

    def _reset_idx(self, ids: torch.Tensor) -> None:
        self.position[ids] = torch.rand(len(ids), 2, generator=self.generator) * 2 - 1
        self.goal[ids] = torch.rand(len(ids), 2, generator=self.generator) * 2 - 1
        self.steps[ids] = 0

    def _obs(self) -> dict[str, torch.Tensor]:
        return {"policy": torch.cat([self.position, self.goal - self.position], dim=1).to(self.device)}

    def reset(self, seed: int | None = None):
        if seed is not None:
            self.generator.manual_seed(seed)
        self._reset_idx(torch.arange(self.num_envs))
        return self._obs(), {}

    def step(self, actions: torch.Tensor):
        assert isinstance(actions, torch.Tensor) and actions.device == self.device, type(actions)
        self.actions_seen.append(actions.clone())
        self.position += 0.1 * actions.float().clamp(-1, 1)
        self.steps += 1
        distance = (self.goal - self.position).norm(dim=1)
        reached = distance < 0.1
        truncated = (self.steps >= self.max_episode_length) & ~reached
        reward = -distance + 10.0 * reached.float()
        self.termination_manager.terms["goal_reached"] = reached.clone()
        done = (reached | truncated).nonzero().flatten()
        if len(done):
            self._reset_idx(done)
        return self._obs(), reward, reached, truncated, {"log": {}}

    def close(self) -> None:
        pass


def make(task: str, num_envs: int, device: str) -> PointMassLabEnv:
    """The factory the adapter calls (``factory=tests.sim_envs.isaaclab_standin:make``)."""
    return PointMassLabEnv(num_envs, device)
