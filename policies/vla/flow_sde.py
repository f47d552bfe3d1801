"""Flow-SDE (πRL; RLinf's ``flow_sde``): the stochastic sampler that makes a flow-matching expert
(π0, π0.5, SmolVLA) an RL policy with a log-prob per chunk.

Convention (π0): ``x_t = t * noise + (1 - t) * action``, so t=1 is noise and t=0 the action, and
the expert predicts the velocity ``v = noise - action``. Denoising runs ``steps`` Euler steps of
size ``dt = 1 / steps`` from t=1 to t=0.

For RL the ODE step is replaced by the SDE with the same marginals (Flow-SDE, as in πRL and
Flow-GRPO): with ``sigma_t = a * sqrt(t / (1 - t))``,

    x_{t-dt} ~ N(x_t - dt * [v + sigma_t^2 / (2 t) * (x_t + (1 - t) v)],  sigma_t^2 dt).

Each step is a Gaussian whose mean depends on the expert, so the log-prob of the whole chain (the
sampled chunk) is the sum of the steps' Gaussian log-probs, which PPO and GRPO ratio. At ``a = 0``
each step is upstream's Euler step exactly.

With one SDE step per chunk (``flow_sde_steps="one"``, RLinf's ``joint_logprob: false``, πRL's
mixed ODE-SDE rollout), a random step is the SDE's and the others are Euler steps: the chain
stays on the ODE's path but for one perturbation, and the chunk's log-prob is that step's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


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

    def sde_step_rows(
        self, x: torch.Tensor, v: torch.Tensor, t: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`step`'s SDE step with a time per row (``t`` [B]): the means and the stds [B]."""
        capped = t.clamp(max=1.0 - self.dt) if self.steps > 1 else torch.full_like(t, 0.5)
        sigma = self.noise_level * torch.sqrt(capped / (1.0 - capped))
        shape = (-1,) + (1,) * (x.dim() - 1)
        drift = v + (sigma**2 / (2.0 * t)).view(shape) * (x + (1.0 - t).view(shape) * v)
        return x - self.dt * drift, sigma * math.sqrt(self.dt)


def gaussian_log_prob_terms(x: torch.Tensor, mean: torch.Tensor, std: float | torch.Tensor) -> torch.Tensor:
    """Per element, flattened over every dimension but the first: [B, K]. ``std``: one, one per row
    [B], or one per element (``x``'s shape)."""
    if isinstance(std, torch.Tensor):
        if std.dim() == 1:
            std = std.view((-1,) + (1,) * (x.dim() - 1))
        log_std = torch.log(std)
    else:
        log_std = math.log(std)
    per = -0.5 * ((x - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    return per.flatten(1)


def gaussian_entropy(
    std: float | torch.Tensor, shape: tuple[int, ...], device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The entropy of independent Gaussians over ``shape`` [B, ...], summed per row: [B]. ``std``: one,
    one per row [B], or one per element."""
    std = std if isinstance(std, torch.Tensor) else torch.tensor(float(std), device=device)
    if std.dim() == 1:
        std = std.view((-1,) + (1,) * (len(shape) - 1))
    per = 0.5 * math.log(2 * math.pi * math.e) + torch.log(std)
    return per.expand(shape).flatten(1).sum(-1)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: float) -> torch.Tensor:
    """Summed over every dimension but the first."""
    return gaussian_log_prob_terms(x, mean, std).sum(-1)
