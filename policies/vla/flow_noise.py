"""Flow-Noise (πRL; RLinf's ``flow_noise``): exploration noise that the policy learns.

Each denoising step of a rollout is a Gaussian around upstream's Euler step, ``x_{t-dt} ~ N(x_t - dt v,
sigma^2)``, whose std is not a schedule's (as Flow-SDE's) but read by a small head from the
expert's output at that step: one std per chunk step and env action dimension, squashed into
``[min_std, max_std]`` through the log-variance (ReinFlow's ``ExploreNoiseNet``). The head trains
with the policy, so RL can narrow or widen its own exploration per state, step and dimension.
Greedy and upstream's sampler do not use it.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class FlowNoiseHead(nn.Module):
    """Expert features [B, chunk, width] -> stds [B, chunk, action_dim] in ``std_range``."""

    def __init__(
        self, width: int, action_dim: int, std_range: tuple[float, float], hidden: tuple[int, ...] = (128, 64)
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for size_in, size_out in zip((width, *hidden[:-1]), hidden, strict=True):
            layers += [nn.Linear(size_in, size_out), nn.Tanh()]
        self.mlp = nn.Sequential(*layers, nn.Linear(hidden[-1], action_dim))
        low, high = std_range
        # config, not weights: a saved policy takes the range of the config it is loaded with
        self.register_buffer("log_var_min", torch.tensor(2 * math.log(low)), persistent=False)
        self.register_buffer("log_var_max", torch.tensor(2 * math.log(high)), persistent=False)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        squashed = torch.tanh(self.mlp(features.float()))
        log_var = self.log_var_min + (self.log_var_max - self.log_var_min) * (squashed + 1.0) / 2.0
        return torch.exp(0.5 * log_var)
