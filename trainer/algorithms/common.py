"""Pieces shared by the algorithms: on-policy episode collection and GAE."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from policies import Policy
from sim_envs.vector import EpisodeSummary, SimVectorEnv


@dataclass
class OnPolicyBatch:
    """Decisions from N envs over T steps. Arrays are [T, N, ...]; ``obs`` holds numpy arrays."""

    obs: dict[str, Any]  # {"state": [T, N, D], "images": {cam: [T, N, H, W, 3]}}
    samples: torch.Tensor  # [T, N, chunk, A]
    log_probs: torch.Tensor  # [T, N]
    values: torch.Tensor  # [T, N] (zeros without a value head)
    rewards: torch.Tensor  # [T, N], the chunk's rewards summed
    dones: torch.Tensor  # [T, N], episode ended after this decision (terminated or truncated)
    terminated: torch.Tensor  # [T, N]
    bootstrap_values: torch.Tensor  # [T, N], V(final obs) where an episode was truncated, else 0
    # [T, N] per-decision training weight: the source's sampling weight, 0 where nothing was played
    # (a dead robot slot) or the episode was aborted. Ones for plain sim envs.
    weights: torch.Tensor | None = None
    last_obs: dict[str, Any] = field(default_factory=dict)  # the observation after the last decision
    env_steps: int = 0
    finished: list[EpisodeSummary] = field(default_factory=list)

    def flat_obs(self) -> dict[str, Any]:
        """[T, N, ...] -> [T*N, ...] tensors for minibatching."""
        return {
            "state": torch.as_tensor(self.obs["state"]).flatten(0, 1),
            "images": {k: torch.as_tensor(v).flatten(0, 1) for k, v in self.obs["images"].items()},
        }


def select_obs(obs: dict[str, Any], idx: torch.Tensor) -> dict[str, Any]:
    """Rows ``idx`` of a flat observation batch (state and every camera)."""
    return {"state": obs["state"][idx], "images": {k: v[idx] for k, v in obs["images"].items()}}


def weighted_mean(values: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``values`` under per-sample ``weights`` (plain mean when None)."""
    if weights is None:
        return values.mean()
    return (values * weights).sum() / weights.sum().clamp_min(1e-8)


def clipped_surrogate_loss(
    advantages: torch.Tensor, ratio: torch.Tensor, clip: float, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """PPO's pessimistic clipped policy objective, as a loss to minimise."""
    surrogate = torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - clip, 1 + clip))
    return weighted_mean(surrogate, weights)


def _stack_obs(observations: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "state": np.stack([o["state"] for o in observations]),
        "images": {k: np.stack([o["images"][k] for o in observations]) for k in observations[0]["images"]},
    }


def collect_on_policy(
    venv: SimVectorEnv,
    policy: Policy,
    seed: int,
    num_steps: int,
    cameras: list[str],
    seeds: list[int] | None = None,
) -> OnPolicyBatch:
    """Reset the envs (env i from ``seed + i``, or ``seeds[i]``) and play ``num_steps`` decisions."""
    obs, _ = venv.reset(seed=seed, seeds=seeds)
    keep = lambda o: {"state": o["state"], "images": {c: o["images"][c] for c in cameras}}  # noqa: E731
    stored, samples, log_probs, values = [], [], [], []
    rewards, dones, terminated, bootstrap, weights = [], [], [], [], []
    source_weights = torch.as_tensor(
        getattr(venv, "source_weights", np.ones(venv.num_envs)), dtype=torch.float32
    )
    episode_start = [0] * venv.num_envs  # decision index where each env's current episode began
    finished: list[EpisodeSummary] = []
    env_steps = 0
    for _ in range(num_steps):
        policy.update_normalizers(obs)
        out = policy.act(obs, mode="sample")
        stored.append(keep(obs))
        samples.append(out.samples)
        log_probs.append(out.log_prob)
        values.append(out.value if out.value is not None else torch.zeros(venv.num_envs))
        result = venv.chunk_step(out.actions.numpy())
        env_steps += int(result.valid.sum())
        weights.append(source_weights * torch.as_tensor(result.valid.any(1), dtype=torch.float32))
        for i in result.aborted:  # the whole cut episode is untrainable, not just this decision
            for t in range(episode_start[i], len(weights)):
                weights[t][i] = 0.0
        for i in np.flatnonzero(result.done):
            episode_start[i] = len(weights)
        rewards.append(torch.as_tensor((result.rewards * result.valid).sum(1)))
        step_done = result.done
        dones.append(torch.as_tensor(step_done))
        terminated.append(torch.as_tensor(result.terminated.any(1)))
        boot = torch.zeros(venv.num_envs)
        truncated_envs = [
            i for i in range(venv.num_envs) if result.truncated[i].any() and not result.terminated[i].any()
        ]
        if truncated_envs and getattr(policy, "critic", None) is not None:
            final = SimVectorEnv.stack_obs([result.final_obs[i] for i in truncated_envs])
            with torch.no_grad():
                boot[truncated_envs] = policy.value(final)
        bootstrap.append(boot)
        finished.extend(result.finished)
        obs = result.obs
    return OnPolicyBatch(
        obs=_stack_obs(stored),
        samples=torch.stack(samples),
        log_probs=torch.stack(log_probs),
        values=torch.stack(values),
        rewards=torch.stack(rewards).float(),
        dones=torch.stack(dones).float(),
        terminated=torch.stack(terminated).float(),
        bootstrap_values=torch.stack(bootstrap),
        weights=torch.stack(weights),
        last_obs=obs,
        env_steps=env_steps,
        finished=finished,
    )


def generalized_advantages(
    batch: OnPolicyBatch, last_values: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(lambda). Truncated episodes bootstrap from V(final obs); terminated ones from zero.

    ``last_values`` is V(obs after the last decision), used where the rollout cuts an episode.
    Returns (advantages, returns), both [T, N].
    """
    num_steps = batch.rewards.shape[0]
    advantages = torch.zeros_like(batch.rewards)
    last_gae = torch.zeros_like(last_values)
    for t in reversed(range(num_steps)):
        next_value = last_values if t == num_steps - 1 else batch.values[t + 1]
        not_done = 1.0 - batch.dones[t]
        # Value after this decision: next state's value if the episode goes on, the final obs's
        # value if it was cut by the time limit, zero if it terminated.
        target = batch.rewards[t] + gamma * (
            not_done * next_value + batch.dones[t] * batch.bootstrap_values[t]
        )
        delta = target - batch.values[t]
        last_gae = delta + gamma * lam * not_done * last_gae
        advantages[t] = last_gae
    return advantages, advantages + batch.values


def episode_metrics(finished: list[EpisodeSummary]) -> dict[str, float]:
    if not finished:
        return {"return_mean": float("nan"), "success_rate": float("nan"), "episode_length": float("nan")}
    return {
        "return_mean": float(np.mean([e.episode_return for e in finished])),
        "success_rate": float(np.mean([e.success for e in finished])),
        "episode_length": float(np.mean([e.length for e in finished])),
    }


@dataclass
class IterationResult:
    """One training iteration's outcome, for the runner's logs."""

    env_steps: int
    finished: list[EpisodeSummary]
    metrics: dict[str, float]


def decisions_per_episode(venv: SimVectorEnv, policy: Policy) -> int:
    """Decisions needed to play one full episode with the policy's action chunks."""
    return -(-venv.spec.max_episode_steps // policy.chunk_size)


def policy_cameras(policy: Policy) -> list[str]:
    return list(policy.cfg.cameras) if policy.cfg.kind == "cnn" else []
