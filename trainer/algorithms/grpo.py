"""GRPO: group-relative policy optimisation, the critic-free algorithm RLinf uses for VLAs.

The envs are split into groups of G. Every env in a group resets from the same seed, so the G
rollouts start from the same state. Each rollout's episode return is normalised within its group
(advantage = (R - mean) / std), that advantage is given to every decision of the episode, and the
policy takes clipped-ratio steps on it. No value function is learned.

Two options change what a group contributes: ``scale_by_group_std=False`` leaves the advantage in
return units (R - mean; Dr. GRPO, Liu et al. 2025), so a group whose rollouts differ by one step of
reward no longer weighs as much as one where a rollout succeeded and the rest failed; and
``drop_uniform_groups`` leaves out groups whose rollouts all scored the same (their advantage is 0),
so every minibatch holds only decisions that carry a signal (DAPO's dynamic sampling; RLinf's
``filter_rewards``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from policies import Policy
from protos.batch import VectorEnv
from trainer.algorithms.common import (
    IterationResult,
    OnPolicyBatch,
    check_ratio_level,
    clipped_surrogate_loss,
    collect_on_policy,
    decisions_per_episode,
    flat_log_prob_terms,
    log_ratio,
    per_sample,
    select_obs,
)
from trainer.devices import module_device


@dataclass
class GRPOConfig:
    group_size: int = 8  # envs per group, reset to one seed; advantages are relative within a group
    learning_rate: float = 3e-4  # Adam's step size
    update_epochs: int = 4  # passes over each iteration's batch
    num_minibatches: int = 4  # minibatches per pass
    clip_coef: float = 0.2  # the policy ratio's clip range
    clip_coef_high: float = 0.0  # the ratio's upper clip, 1 + this (clip-higher); 0: clip_coef
    ratio_level: str = "chunk"  # "chunk" or "token": as PPOConfig.ratio_level
    entropy_coef: float = 0.0  # the entropy bonus's weight
    kl_coef: float = 0.0  # penalty on the k3 KL to the rollout policy
    max_grad_norm: float = 0.5  # gradients are clipped to this norm
    scale_by_group_std: bool = True  # (R - mean) / std; false: R - mean (Dr. GRPO)
    drop_uniform_groups: bool = False  # leave groups whose returns are all equal out of the update


class GRPO:
    """Critic-free policy optimisation with group-normalised episode returns."""

    config_class = GRPOConfig

    def __init__(self, policy: Policy, cfg: GRPOConfig) -> None:
        check_ratio_level(cfg.ratio_level)
        self.policy, self.cfg = policy, cfg
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate, eps=1e-5)

    @staticmethod
    def reset_seeds(cfg: GRPOConfig, seed: int, num_envs: int) -> list[int]:
        """Env ``i`` resets from ``seed + i // group_size``: a group's rollouts share a start."""
        groups, rest = divmod(num_envs, cfg.group_size)
        if rest or groups == 0:
            raise ValueError(
                f"env.num_envs ({num_envs}) must be a multiple of algo.group_size ({cfg.group_size})"
            )
        return [seed + i // cfg.group_size for i in range(num_envs)]

    def iterate(self, venv: VectorEnv, seed: int) -> IterationResult:
        tick = time.perf_counter()
        seeds = self.reset_seeds(self.cfg, seed, venv.num_envs)
        steps = decisions_per_episode(venv, self.policy)
        batch = collect_on_policy(venv, self.policy, seed, steps, self.policy.cameras, seeds=seeds)
        collect_s = time.perf_counter() - tick
        metrics = self.update(batch)
        metrics.update(collect_s=collect_s, policy_lag=0.0)
        return IterationResult(batch.env_steps, batch.finished, metrics)

    def first_episode_mask(self, batch: OnPolicyBatch) -> torch.Tensor:
        """[T, N]: 1 for decisions in each env's first episode (later ones restart from other seeds)."""
        ended_before = torch.cumsum(batch.dones, dim=0) - batch.dones
        return (ended_before == 0).float()

    def group_advantages(self, batch: OnPolicyBatch, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Each env's first-episode advantage [N] and the first-episode mask [T, N]; with
        ``drop_uniform_groups`` the mask is 0 for every env of a group whose returns are all equal."""
        mask = self.first_episode_mask(batch)
        grouped = self.group_returns(batch, groups)
        advantages = grouped - grouped.mean(1, keepdim=True)
        if self.cfg.scale_by_group_std:
            advantages = advantages / (grouped.std(1, keepdim=True) + 1e-6)
        if self.cfg.drop_uniform_groups:
            informative = self.informative(grouped).float()
            mask = mask * informative.repeat_interleave(self.cfg.group_size).unsqueeze(0)
        return advantages.reshape(-1), mask

    def group_returns(self, batch: OnPolicyBatch, groups: int) -> torch.Tensor:
        """[groups, group_size]: each env's first-episode return."""
        return (batch.rewards * self.first_episode_mask(batch)).sum(0).reshape(groups, self.cfg.group_size)

    @staticmethod
    def informative(grouped: torch.Tensor) -> torch.Tensor:
        """[groups]: whether a group's returns differ (a uniform group's advantages are all 0)."""
        return grouped.max(1).values > grouped.min(1).values

    def update(self, batch: OnPolicyBatch) -> dict[str, float]:
        cfg, policy = self.cfg, self.policy
        device = module_device(policy)
        batch = batch.to(device)
        groups = batch.rewards.shape[1] // cfg.group_size
        episode_adv, mask = self.group_advantages(batch, groups)
        advantages = (episode_adv.unsqueeze(0) * mask).flatten()
        keep = mask.flatten() > 0
        obs = batch.flat_obs()
        obs = select_obs(obs, keep)
        samples = batch.samples.flatten(0, 1)[keep]
        old_log_probs = batch.log_probs.flatten()[keep]
        old_terms = flat_log_prob_terms(batch)[keep] if cfg.ratio_level == "token" else None
        advantages = advantages[keep]
        size = samples.shape[0]
        returns = self.group_returns(batch, groups)
        summary = {
            "group_return_std": float(returns.std(1).mean()),
            "informative_groups": float(self.informative(returns).float().mean()),
        }
        if size == 0:  # every group uniform and dropped: nothing to learn from this batch
            return {"policy_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, **summary}
        minibatch = max(1, size // cfg.num_minibatches)
        stats: dict[str, list[float]] = {"policy_loss": [], "entropy": [], "approx_kl": []}
        for _ in range(cfg.update_epochs):
            order = torch.randperm(size, device=device)
            for start in range(0, size, minibatch):
                idx = order[start : start + minibatch]
                mb_obs = select_obs(obs, idx)
                evaluation = policy.evaluate(mb_obs, samples[idx])
                mb_log_ratio = log_ratio(
                    evaluation, old_log_probs[idx], None if old_terms is None else old_terms[idx]
                )
                ratio = mb_log_ratio.exp()
                approx_kl = per_sample((ratio - 1) - mb_log_ratio).mean()
                adv = advantages[idx]
                policy_loss = clipped_surrogate_loss(adv, ratio, cfg.clip_coef, clip_high=cfg.clip_coef_high)
                entropy = evaluation.entropy.mean()
                loss = policy_loss - cfg.entropy_coef * entropy + cfg.kl_coef * approx_kl
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                stats["policy_loss"].append(float(policy_loss.detach()))
                stats["entropy"].append(float(entropy.detach()))
                stats["approx_kl"].append(float(approx_kl.detach()))
        return {**{k: float(np.mean(v)) for k, v in stats.items()}, **summary}

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
