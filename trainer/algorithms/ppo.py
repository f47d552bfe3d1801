"""PPO (clipped surrogate, GAE, value loss, minibatch epochs), read top to bottom.

One iteration: every env resets from a seed, the sampling policy plays ``num_steps`` decisions,
GAE turns rewards into advantages, then ``update_epochs`` passes over shuffled minibatches
optimise the clipped objective. Approximate KL and entropy are reported; an optional
``target_kl`` stops the epochs early.
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
    generalized_advantages,
    log_ratio,
    per_sample,
    select_obs,
    weighted_mean,
)
from trainer.devices import module_device


@dataclass
class PPOConfig:
    learning_rate: float = 3e-4  # Adam's step size
    gamma: float = 0.99  # discount
    gae_lambda: float = 0.95  # GAE's lambda
    update_epochs: int = 8  # passes over each iteration's batch
    num_minibatches: int = 8  # minibatches per pass
    clip_coef: float = 0.2  # the policy ratio's clip range
    clip_coef_high: float = 0.0  # the ratio's upper clip, 1 + this (clip-higher); 0: clip_coef
    # "chunk": one ratio per decision, of its summed log-prob; "token": one per log-prob term (action
    # token, or chunk step and action dim), each clipped on its own (RLinf's logprob_type=token_level)
    ratio_level: str = "chunk"
    # The value head's own step size (0: learning_rate). A fresh critic under a policy started from
    # SFT must fit returns of the task's scale while the policy takes small steps.
    value_learning_rate: float = 0.0
    # Clip each value update to clip_coef around the rollout's value (the PPO reference's choice).
    # The clip is in return units: with returns in the tens (a success reward per step), the value
    # can move only clip_coef per iteration, and the critic never catches up.
    clip_value_loss: bool = True
    value_coef: float = 0.5  # the value loss's weight
    entropy_coef: float = 0.0  # the entropy bonus's weight
    max_grad_norm: float = 0.5  # gradients are clipped to this norm
    target_kl: float = 0.0  # 0 disables early stopping; the KL is per term at ratio_level=token
    normalize_advantages: bool = True  # advantages to zero mean, unit std per minibatch
    # The first N updates fit the value head only: a policy started from SFT/BC has a fresh critic,
    # and its first advantages are noise that would undo what the start knew.
    critic_warmup_updates: int = 0


class PPO:
    """Proximal Policy Optimisation on an actor-critic policy."""

    config_class = PPOConfig

    def __init__(self, policy: Policy, cfg: PPOConfig) -> None:
        if not policy.has_value_head:
            raise ValueError("PPO needs a value head (policy.value_head=true)")
        check_ratio_level(cfg.ratio_level)
        self.policy, self.cfg = policy, cfg
        self.optimizer = torch.optim.Adam(self._parameter_groups(), lr=cfg.learning_rate, eps=1e-5)
        self.updates_done = 0

    def _parameter_groups(self) -> list[dict]:
        """One group; or, with ``value_learning_rate``, the value head in a second group of its own
        (one group keeps optimizer states saved before the option existed loadable)."""
        if not self.cfg.value_learning_rate:
            return [{"params": list(self.policy.parameters())}]
        critic = self.policy.value_parameters()
        in_critic = {id(p) for p in critic}
        actor = [p for p in self.policy.parameters() if id(p) not in in_critic]
        return [{"params": actor}, {"params": critic, "lr": self.cfg.value_learning_rate}]

    def iterate(self, venv: VectorEnv, seed: int) -> IterationResult:
        """Collect one episode per env from seeded resets, then update."""
        tick = time.perf_counter()
        batch = collect_on_policy(
            venv, self.policy, seed, decisions_per_episode(venv, self.policy), self.policy.cameras
        )
        collect_s = time.perf_counter() - tick
        metrics = self.update(batch)
        # The same schema as PPO on Ray workers, where the rollout may trail the actor by a version.
        metrics.update(collect_s=collect_s, policy_lag=0.0)
        return IterationResult(batch.env_steps, batch.finished, metrics)

    def update(self, batch: OnPolicyBatch) -> dict[str, float]:
        cfg, policy = self.cfg, self.policy
        device = module_device(policy)
        batch = batch.to(device)
        with torch.no_grad():
            last_values = policy.value(batch.last_obs)
        advantages, returns = generalized_advantages(batch, last_values, cfg.gamma, cfg.gae_lambda)

        obs = batch.flat_obs()
        samples = batch.samples.flatten(0, 1)
        old_log_probs = batch.log_probs.flatten()
        old_terms = flat_log_prob_terms(batch) if cfg.ratio_level == "token" else None
        old_values = batch.values.flatten()
        advantages, returns = advantages.flatten(), returns.flatten()
        # Per-sample weights (source weights; 0 for aborted robot episodes). Uniform: plain means.
        weights = batch.weights.flatten() if batch.weights is not None else None
        if weights is not None and bool((weights == 1).all()):
            weights = None
        size = samples.shape[0]
        minibatch = max(1, size // cfg.num_minibatches)
        actor_scale = 0.0 if self.updates_done < cfg.critic_warmup_updates else 1.0
        self.updates_done += 1

        stats: dict[str, list[float]] = {
            k: [] for k in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac")
        }
        for _ in range(cfg.update_epochs):
            order = torch.randperm(size, device=device)
            epoch_kl = []
            for start in range(0, size, minibatch):
                idx = order[start : start + minibatch]
                mb_w = weights[idx] if weights is not None else None
                if mb_w is not None and float(mb_w.sum()) == 0.0:
                    continue  # nothing trainable in this minibatch
                mb_obs = select_obs(obs, idx)
                evaluation = policy.evaluate(mb_obs, samples[idx])
                mb_log_ratio = log_ratio(
                    evaluation, old_log_probs[idx], None if old_terms is None else old_terms[idx]
                )
                ratio = mb_log_ratio.exp()
                with torch.no_grad():  # the low-variance k3 estimator; per term, averaged, at token level
                    approx_kl = weighted_mean(per_sample((ratio - 1) - mb_log_ratio), mb_w)
                    clipped = (ratio < 1 - cfg.clip_coef) | (
                        ratio > 1 + (cfg.clip_coef_high or cfg.clip_coef)
                    )
                    clip_frac = weighted_mean(per_sample(clipped.float()), mb_w)

                mb_adv = advantages[idx]
                if cfg.normalize_advantages and len(idx) > 1:
                    kept = mb_adv if mb_w is None else mb_adv[mb_w > 0]
                    if len(kept) > 1:
                        mb_adv = (mb_adv - kept.mean()) / (kept.std() + 1e-8)
                policy_loss = clipped_surrogate_loss(mb_adv, ratio, cfg.clip_coef, mb_w, cfg.clip_coef_high)

                value = evaluation.value
                value_error = (value - returns[idx]) ** 2
                if cfg.clip_value_loss:  # as in the PPO reference implementation
                    value_clipped = old_values[idx] + torch.clamp(
                        value - old_values[idx], -cfg.clip_coef, cfg.clip_coef
                    )
                    value_error = torch.max(value_error, (value_clipped - returns[idx]) ** 2)
                value_loss = 0.5 * weighted_mean(value_error, mb_w)

                entropy = weighted_mean(evaluation.entropy, mb_w)
                loss = actor_scale * (policy_loss - cfg.entropy_coef * entropy) + cfg.value_coef * value_loss
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
                self.optimizer.step()

                for key, value_ in (
                    ("policy_loss", policy_loss),
                    ("value_loss", value_loss),
                    ("entropy", entropy),
                    ("approx_kl", approx_kl),
                    ("clip_frac", clip_frac),
                ):
                    stats[key].append(float(value_.detach()))
                epoch_kl.append(float(approx_kl))
            if cfg.target_kl and epoch_kl and np.mean(epoch_kl) > cfg.target_kl:
                break

        explained = 1.0 - float(torch.var(returns - old_values) / (torch.var(returns) + 1e-8))
        return {**{k: float(np.mean(v)) for k, v in stats.items()}, "explained_variance": explained}

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "updates_done": self.updates_done}

    def load_state_dict(self, state: dict) -> None:
        saved_groups = len(state["optimizer"]["param_groups"])
        if saved_groups != len(self.optimizer.param_groups):
            raise ValueError(
                f"this checkpoint's PPO optimizer has {saved_groups} parameter group(s), this run "
                f"{len(self.optimizer.param_groups)}: resume with the algo.value_learning_rate it was "
                "saved with (0 for one group)"
            )
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates_done = int(state.get("updates_done", 0))
