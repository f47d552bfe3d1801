"""Q-function ensembles for SAC / RLPD: E critics evaluated in one batched matmul."""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn


class EnsembleLinear(nn.Module):
    """E independent linear layers applied to [E, B, in] in one ``baddbmm``."""

    def __init__(self, ensemble: int, in_features: int, out_features: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(ensemble, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(ensemble, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class QEnsemble(nn.Module):
    """E critics Q(features, action) -> [E, B]; optional LayerNorm after each hidden layer (RLPD)."""

    def __init__(self, in_dim: int, hidden: list[int], ensemble: int = 2, layer_norm: bool = False) -> None:
        super().__init__()
        self.ensemble = ensemble
        layers: list[nn.Module] = []
        sizes = [in_dim, *hidden]
        for a, b in itertools.pairwise(sizes):
            layers.append(EnsembleLinear(ensemble, a, b))
            if layer_norm:
                layers.append(nn.LayerNorm(b))
            layers.append(nn.ReLU())
        layers.append(EnsembleLinear(ensemble, sizes[-1], 1))
        self.net = nn.Sequential(*layers)

    def forward(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        x = torch.cat([features, actions], dim=-1).unsqueeze(0).expand(self.ensemble, -1, -1)
        return self.net(x).squeeze(-1)
