"""pi0's action head: an action expert that turns noise into an action chunk by flow matching,
attending to the backbone's prefix; for RL, a stochastic sampler with a Gaussian log-prob per step.

Convention (pi0): ``x_t = t * noise + (1 - t) * action``, so t=1 is noise and t=0 the action, and
the expert predicts the velocity ``v = noise - action``. Denoising runs ``steps`` Euler steps of
size ``dt = 1 / steps`` from t=1 to t=0.

For RL the ODE step is replaced by the SDE with the same marginals (Flow-SDE, as in piRL and
Flow-GRPO): with ``sigma_t = a * sqrt(t / (1 - t))``,

    x_{t-dt} ~ N(x_t - dt * [v + sigma_t^2 / (2 t) * (x_t + (1 - t) v)],  sigma_t^2 dt).

Each step is a Gaussian whose mean depends on the expert, so the log-prob of the whole chain (the
sampled chunk) is the sum of the steps' Gaussian log-probs, which PPO and GRPO ratio. The chain is
what ``act`` returns as its samples: ``[B, steps + 1, chunk, action_dim]``, noise first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


def time_embedding(t: torch.Tensor, width: int) -> torch.Tensor:
    """Sinusoidal features of t in [0, 1]: [B] -> [B, width]."""
    half = width // 2
    freqs = torch.exp(-math.log(1000.0) * torch.arange(half, device=t.device) / half)
    angles = t[:, None] * freqs[None] * 2 * math.pi
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class ActionExpert(nn.Module):
    """A small transformer over the chunk's noisy actions (bidirectional among themselves) that
    cross-attends to the backbone's prefix states and predicts the velocity."""

    def __init__(self, hidden_size: int, action_dim: int, chunk: int, width: int, layers: int) -> None:
        super().__init__()
        self.width = width
        self.context = nn.Linear(hidden_size, width)
        self.action_in = nn.Linear(action_dim, width)
        self.time_mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.chunk_positions = nn.Parameter(torch.randn(chunk, width) * 0.02)
        layer = nn.TransformerDecoderLayer(
            width, nhead=4, dim_feedforward=2 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.decoder = nn.TransformerDecoder(layer, layers)
        self.velocity_out = nn.Linear(width, action_dim)

    def forward(
        self, noisy: torch.Tensor, t: torch.Tensor, prefix_states: torch.Tensor, prefix_mask: torch.Tensor
    ) -> torch.Tensor:
        """noisy [B, chunk, A], t [B], prefix states [B, L, hidden] and mask [B, L] -> velocity."""
        x = (
            self.action_in(noisy)
            + self.chunk_positions
            + self.time_mlp(time_embedding(t, self.width))[:, None]
        )
        memory = self.context(prefix_states)
        out = self.decoder(x, memory, memory_key_padding_mask=~prefix_mask.bool())
        return self.velocity_out(out)


@dataclass(frozen=True)
class FlowSchedule:
    """The denoising grid and the SDE's noise scale."""

    steps: int
    noise_level: float

    def times(self) -> list[float]:
        return [1.0 - k / self.steps for k in range(self.steps)]  # the t each step starts from

    @property
    def dt(self) -> float:
        return 1.0 / self.steps

    def sigma(self, t: float) -> float:
        """sigma_t = a sqrt(t / (1 - t)), with t capped one step below 1 (it diverges at t=1)."""
        t = min(t, 1.0 - self.dt) if self.steps > 1 else 0.5
        return self.noise_level * math.sqrt(t / (1.0 - t))

    def step(
        self, x: torch.Tensor, v: torch.Tensor, t: float, stochastic: bool
    ) -> tuple[torch.Tensor, float]:
        """The next state's mean and std: the Flow-SDE step, or the plain Euler ODE step."""
        if not stochastic or self.noise_level == 0.0:
            return x - self.dt * v, 0.0
        sigma = self.sigma(t)
        drift = v + sigma**2 / (2.0 * t) * (x + (1.0 - t) * v)
        return x - self.dt * drift, sigma * math.sqrt(self.dt)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: float) -> torch.Tensor:
    """Summed over every dimension but the first."""
    per = -0.5 * ((x - mean) / std) ** 2 - math.log(std) - 0.5 * math.log(2 * math.pi)
    return per.flatten(1).sum(-1)


class FlowActionHead(nn.Module):
    """Samples chunks through the expert and scores sampled chains."""

    def __init__(
        self, hidden_size: int, action_dim: int, chunk: int, width: int, layers: int, schedule: FlowSchedule
    ):
        super().__init__()
        self.expert = ActionExpert(hidden_size, action_dim, chunk, width, layers)
        self.schedule, self.chunk, self.action_dim = schedule, chunk, action_dim

    @torch.no_grad()
    def sample(self, prefix_states: torch.Tensor, prefix_mask: torch.Tensor, greedy: bool):
        """(chain [B, steps+1, chunk, A], log-prob [B]). Greedy: the ODE from the prior's mean (zero
        noise), so the same observation always gives the same chunk; log-prob 0."""
        batch = prefix_states.shape[0]
        shape = (batch, self.chunk, self.action_dim)
        device = prefix_states.device
        x = torch.zeros(shape, device=device) if greedy else torch.randn(shape, device=device)
        chain, log_prob = [x], torch.zeros(batch, device=x.device)
        for t in self.schedule.times():
            v = self.expert(x, torch.full((batch,), t, device=x.device), prefix_states, prefix_mask)
            mean, std = self.schedule.step(x, v, t, stochastic=not greedy)
            x = mean + std * torch.randn_like(mean) if std > 0 else mean
            if std > 0:
                log_prob = log_prob + gaussian_log_prob(x, mean, std)
            chain.append(x)
        return torch.stack(chain, 1), log_prob

    def score(self, prefix_states: torch.Tensor, prefix_mask: torch.Tensor, chain: torch.Tensor):
        """(log-prob [B], entropy [B]) of sampled chains under the current expert."""
        batch = chain.shape[0]
        log_prob = torch.zeros(batch, device=chain.device)
        entropy = torch.zeros(batch, device=chain.device)
        per_step_dims = self.chunk * self.action_dim
        for k, t in enumerate(self.schedule.times()):
            x = chain[:, k]
            v = self.expert(x, torch.full((batch,), t, device=x.device), prefix_states, prefix_mask)
            mean, std = self.schedule.step(x, v, t, stochastic=True)
            if std > 0:
                log_prob = log_prob + gaussian_log_prob(chain[:, k + 1], mean, std)
                entropy = entropy + per_step_dims * (0.5 * math.log(2 * math.pi * math.e) + math.log(std))
        return log_prob, entropy

    def imitation_loss(
        self,
        prefix_states: torch.Tensor,
        prefix_mask: torch.Tensor,
        unit_targets: torch.Tensor,
        valid: torch.Tensor,
    ) -> torch.Tensor:
        """Flow matching: the expert's velocity at a random t against ``noise - action``."""
        batch = unit_targets.shape[0]
        t = torch.rand(batch, device=unit_targets.device)
        noise = torch.randn_like(unit_targets)
        noisy = t[:, None, None] * noise + (1.0 - t[:, None, None]) * unit_targets
        v = self.expert(noisy, t, prefix_states, prefix_mask)
        errors = (v - (noise - unit_targets)).pow(2).mean(-1)
        return (errors * valid).sum() / valid.sum().clamp(min=1.0)

    @staticmethod
    def actions_of(chain: torch.Tensor) -> torch.Tensor:
        """The chain's end, clipped into [-1, 1]: [B, chunk, A]."""
        return chain[:, -1].clamp(-1.0, 1.0)
