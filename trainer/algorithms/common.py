"""Pieces shared by the algorithms: on-policy episode collection and GAE."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch.nn import functional

from policies import Policy
from protos.batch import ChunkResult, EpisodeSummary, VectorEnv, select_row, stack_obs


@dataclass
class OnPolicyBatch:
    """Decisions from N envs over T steps. Arrays are [T, N, ...]; ``obs`` holds numpy arrays."""

    obs: dict[str, Any]  # {"state": [T, N, D], "images": {cam: [T, N, H, W, 3]}, "instruction": [T][N]}
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
    # [T, N, K]: the terms each log-prob sums (PolicyOutput.log_prob_terms), where the policy gives them
    log_prob_terms: torch.Tensor | None = None

    def flat_obs(self) -> dict[str, Any]:
        """[T, N, ...] -> [T*N, ...] tensors (and a list of T*N instructions) for minibatching."""
        return {
            "state": torch.as_tensor(self.obs["state"]).flatten(0, 1),
            "images": {k: torch.as_tensor(v).flatten(0, 1) for k, v in self.obs["images"].items()},
            "instruction": [text for row in self.obs.get("instruction", []) for text in row],
        }

    def to(self, device: torch.device) -> OnPolicyBatch:
        """The batch on the learner's device: observations become tensors there; ``last_obs`` and
        the episode summaries stay as they are (the policy moves what it reads)."""
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        obs = {
            "state": torch.as_tensor(self.obs["state"], device=device),
            "images": {k: torch.as_tensor(v, device=device) for k, v in self.obs["images"].items()},
            "instruction": self.obs.get("instruction", []),
        }
        tensors = ("samples", "log_probs", "values", "rewards", "dones", "terminated", "bootstrap_values")
        return replace(
            self,
            obs=obs,
            weights=move(self.weights),
            log_prob_terms=move(self.log_prob_terms),
            **{k: move(getattr(self, k)) for k in tensors},
        )


def select_obs(obs: dict[str, Any], idx: torch.Tensor) -> dict[str, Any]:
    """Rows ``idx`` of a flat observation batch (state, every camera, and the instructions)."""
    texts = obs.get("instruction") or []
    rows = torch.arange(len(obs["state"]))[idx.cpu()].tolist() if texts else []
    return {
        "state": obs["state"][idx],
        "images": {k: v[idx] for k, v in obs["images"].items()},
        "instruction": [texts[i] for i in rows],
    }


def weighted_mean(values: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``values`` under per-sample ``weights`` (plain mean when None)."""
    if weights is None:
        return values.mean()
    return (values * weights).sum() / weights.sum().clamp_min(1e-8)


RATIO_LEVELS = ("chunk", "token")


def check_ratio_level(level: str) -> None:
    if level not in RATIO_LEVELS:
        raise ValueError(f"algo.ratio_level must be one of {list(RATIO_LEVELS)}, got {level!r}")


def flat_log_prob_terms(batch: OnPolicyBatch) -> torch.Tensor:
    """[T*N, K] from a batch whose policy split its log-probs (the ``ratio_level=token`` input)."""
    if batch.log_prob_terms is None:
        raise ValueError(
            "algo.ratio_level=token needs a policy whose act() returns log_prob_terms; this one does "
            "not: use algo.ratio_level=chunk"
        )
    return batch.log_prob_terms.flatten(0, 1)


def log_ratio(evaluation, old_log_prob: torch.Tensor, old_terms: torch.Tensor | None) -> torch.Tensor:
    """log(pi / pi_old): [B] for the decision's summed log-prob (``old_terms`` None), or [B, K], one
    per term (an action token, or a chunk step's action dim): RLinf's ``logprob_type=token_level``."""
    if old_terms is None:
        return evaluation.log_prob - old_log_prob
    return evaluation.log_prob_terms - old_terms


def per_sample(values: torch.Tensor) -> torch.Tensor:
    """[B] as is; [B, K] (one value per term) -> its mean over the terms, [B]."""
    return values.mean(-1) if values.dim() == 2 else values


def clipped_surrogate_loss(
    advantages: torch.Tensor,
    ratio: torch.Tensor,
    clip: float,
    weights: torch.Tensor | None = None,
    clip_high: float = 0.0,
) -> torch.Tensor:
    """PPO's pessimistic clipped policy objective, as a loss to minimise. ``ratio`` is [B] or [B, K]
    (per term, each clipped on its own, the decision's advantage for all). The ratio is clipped to
    [1 - clip, 1 + clip_high] (clip-higher, as DAPO and RLinf's OFT recipes; 0: ``clip``)."""
    high = clip_high or clip
    if ratio.dim() == 2:
        advantages = advantages[:, None]
    surrogate = torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - clip, 1 + high))
    return weighted_mean(per_sample(surrogate), weights)


def _stack_obs(observations: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "state": np.stack([o["state"] for o in observations]),
        "images": {k: np.stack([o["images"][k] for o in observations]) for k in observations[0]["images"]},
        "instruction": [list(o.get("instruction") or []) for o in observations],
    }


def bootstrap_values(policy: Policy, result: ChunkResult) -> torch.Tensor:
    """[N]: V(final obs) for envs whose episode was truncated (not terminated) in ``result``, else 0.
    An env that does not return the last observation (IsaacLab) bootstraps from the next start."""
    boot = torch.zeros(len(result.final_obs))
    truncated = [i for i in range(len(boot)) if result.truncated[i].any() and not result.terminated[i].any()]
    if truncated and policy.has_value_head:
        next_obs = result.next_obs()
        final = stack_obs([select_row(next_obs, i) for i in truncated])
        with torch.no_grad():
            boot[truncated] = policy.value(final).cpu()
    return boot


class TrajectoryBuilder:
    """Accumulates one rollout's decisions into an :class:`OnPolicyBatch`.

    Shared by in-process collection and the Ray rollout pipeline. ``source_weights`` ([N]) weight
    each env's decisions; decisions that played nothing, and every decision of an aborted episode,
    get weight 0.
    """

    def __init__(self, num_envs: int, cameras: list[str], source_weights=None) -> None:
        self.num_envs, self.cameras = num_envs, cameras
        weights = np.ones(num_envs) if source_weights is None else source_weights
        self.source_weights = torch.as_tensor(weights, dtype=torch.float32)
        self.stored: list[dict[str, Any]] = []
        self.samples, self.log_probs, self.log_prob_terms, self.values = [], [], [], []
        self.rewards, self.dones, self.terminated, self.bootstrap, self.weights = [], [], [], [], []
        self.finished: list[EpisodeSummary] = []
        self.env_steps = 0
        self._episode_start = [0] * num_envs  # decision index where each env's current episode began

    def add(self, obs: dict[str, Any], out, result: ChunkResult, bootstrap: torch.Tensor) -> None:
        out = out.cpu()  # the batch is assembled on the CPU, whatever device acted
        self.stored.append(
            {
                "state": obs["state"],
                "images": {c: obs["images"][c] for c in self.cameras},
                "instruction": obs.get("instruction"),
            }
        )
        self.samples.append(out.samples)
        self.log_probs.append(out.log_prob)
        if out.log_prob_terms is not None:
            self.log_prob_terms.append(out.log_prob_terms)
        self.values.append(out.value if out.value is not None else torch.zeros(self.num_envs))
        self.env_steps += int(result.valid.sum())
        self.rewards.append(torch.as_tensor((result.rewards * result.valid).sum(1)))
        self.dones.append(torch.as_tensor(result.done))
        self.terminated.append(torch.as_tensor(result.terminated.any(1)))
        self.bootstrap.append(bootstrap)
        self.weights.append(self.source_weights * torch.as_tensor(result.valid.any(1), dtype=torch.float32))
        for i in result.aborted:  # the whole cut episode is untrainable, not just this decision
            for t in range(self._episode_start[i], len(self.weights)):
                self.weights[t][i] = 0.0
        for i in np.flatnonzero(result.done):
            self._episode_start[i] = len(self.weights)
        self.finished.extend(result.finished)

    def build(self, last_obs: dict[str, Any]) -> OnPolicyBatch:
        return OnPolicyBatch(
            obs=_stack_obs(self.stored),
            samples=torch.stack(self.samples),
            log_probs=torch.stack(self.log_probs),
            values=torch.stack(self.values),
            rewards=torch.stack(self.rewards).float(),
            dones=torch.stack(self.dones).float(),
            terminated=torch.stack(self.terminated).float(),
            bootstrap_values=torch.stack(self.bootstrap),
            weights=torch.stack(self.weights),
            last_obs=last_obs,
            env_steps=self.env_steps,
            finished=self.finished,
            log_prob_terms=(
                torch.stack(self.log_prob_terms)
                if self.log_prob_terms and len(self.log_prob_terms) == len(self.log_probs)
                else None
            ),
        )


def collect_on_policy(
    venv: VectorEnv,
    policy: Policy,
    seed: int,
    num_steps: int,
    cameras: list[str],
    seeds: list[int] | None = None,
) -> OnPolicyBatch:
    """Reset the envs (env i from ``seed + i``, or ``seeds[i]``) and play ``num_steps`` decisions."""
    obs, _ = venv.reset(seed=seed, seeds=seeds)
    trajectory = TrajectoryBuilder(venv.num_envs, cameras, getattr(venv, "source_weights", None))
    for _ in range(num_steps):
        policy.update_normalizers(obs)
        out = policy.act(obs, mode="sample")
        result = venv.chunk_step(out.actions.cpu().numpy())
        trajectory.add(obs, out, result, bootstrap_values(policy, result))
        obs = result.obs
    return trajectory.build(obs)


def concat_batches(batches: list[OnPolicyBatch]) -> OnPolicyBatch:
    """Batches of the same length from disjoint env groups, side by side along the env axis."""
    if len(batches) == 1:
        return batches[0]
    cat = lambda key: torch.cat([getattr(b, key) for b in batches], dim=1)  # noqa: E731
    obs_cat = lambda obs, axis: {  # noqa: E731
        "state": np.concatenate([o["state"] for o in obs], axis),
        "images": {k: np.concatenate([o["images"][k] for o in obs], axis) for k in obs[0]["images"]},
        "instruction": _concat_instructions([o.get("instruction") or [] for o in obs], axis),
    }
    offsets = np.cumsum([0] + [b.samples.shape[1] for b in batches])
    finished = [
        EpisodeSummary(int(offset) + e.env_index, e.episode_return, e.length, e.success)
        for b, offset in zip(batches, offsets)
        for e in b.finished
    ]
    return OnPolicyBatch(
        obs=obs_cat([b.obs for b in batches], 1),
        samples=cat("samples"),
        log_probs=cat("log_probs"),
        values=cat("values"),
        rewards=cat("rewards"),
        dones=cat("dones"),
        terminated=cat("terminated"),
        bootstrap_values=cat("bootstrap_values"),
        weights=cat("weights"),
        last_obs={**obs_cat([b.last_obs for b in batches], 0)},
        env_steps=sum(b.env_steps for b in batches),
        finished=finished,
        log_prob_terms=(None if any(b.log_prob_terms is None for b in batches) else cat("log_prob_terms")),
    )


def _concat_instructions(parts: list[list], axis: int) -> list:
    """Instruction lists side by side: per time step ([T][N] parts, axis 1) or flat ([N], axis 0)."""
    if axis == 0:
        return [text for part in parts for text in part]
    if not all(parts):
        return []
    return [[text for part in parts for text in part[t]] for t in range(len(parts[0]))]


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


def decisions_per_episode(venv: VectorEnv, policy: Policy) -> int:
    """Decisions needed to play one full episode with the policy's action chunks."""
    return -(-venv.spec.max_episode_steps // policy.chunk_size)


@torch.no_grad()
def play_greedy(venv: VectorEnv, policy: Policy, seed: int) -> tuple[int, list[EpisodeSummary]]:
    """One greedy episode per env from seeded resets: (env steps, finished episodes)."""
    obs, _ = venv.reset(seed=seed)
    steps, finished = 0, []
    for _ in range(decisions_per_episode(venv, policy)):
        result = venv.chunk_step(policy.act(obs, mode="greedy").actions.cpu().numpy())
        steps += int(result.valid.sum())
        finished.extend(result.finished)
        obs = result.obs
    return steps, finished


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Pad by replicating edges, then crop back at a random offset per image ([B, H, W, 3] uint8)."""
    if pad <= 0:
        return images
    b, h, w, _ = images.shape
    padded = functional.pad(images.permute(0, 3, 1, 2).float(), (pad, pad, pad, pad), mode="replicate")
    device = images.device
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=generator).to(device)
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=generator).to(device)
    rows = (dy[:, None] + torch.arange(h, device=device)[None]).clamp(max=h + 2 * pad - 1)
    cols = (dx[:, None] + torch.arange(w, device=device)[None]).clamp(max=w + 2 * pad - 1)
    batch = torch.arange(b, device=device)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]
    return out.to(images.dtype)
