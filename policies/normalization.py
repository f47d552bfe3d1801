"""Observation normalisation that lives inside the policy and is saved with it."""

from __future__ import annotations

import torch
from torch import nn


class RunningNormalizer(nn.Module):
    """Running mean/variance of a feature vector (Chan's parallel update), clipped to +-clip sigma."""

    def __init__(self, size: int, clip: float = 10.0, epsilon: float = 1e-4) -> None:
        super().__init__()
        self.clip = clip
        self.register_buffer("mean", torch.zeros(size, dtype=torch.float64))
        self.register_buffer("var", torch.ones(size, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))
        self.register_buffer("frozen", torch.tensor(False))

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        if bool(self.frozen) or batch.shape[0] == 0:
            return
        batch = batch.reshape(-1, self.mean.shape[0]).to(self.mean.device, torch.float64)
        batch_mean, batch_var, n = batch.mean(0), batch.var(0, unbiased=False), batch.shape[0]
        delta = batch_mean - self.mean
        total = self.count + n
        self.mean += delta * n / total
        self.var = (self.var * self.count + batch_var * n + delta.pow(2) * self.count * n / total) / total
        self.count = total

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        std = torch.sqrt(self.var + 1e-8).to(x.dtype)
        return torch.clamp((x - self.mean.to(x.dtype)) / std, -self.clip, self.clip)
