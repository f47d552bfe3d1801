"""Observation encoders: state MLP and a small ResNet-style image encoder."""

from __future__ import annotations

import torch
from torch import nn


def mlp(sizes: list[int], activation: type[nn.Module] = nn.Tanh, layer_norm: bool = False) -> nn.Sequential:
    """Linear layers with activations between (none after the last)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            if layer_norm:
                layers.append(nn.LayerNorm(sizes[i + 1]))
            layers.append(activation())
    return nn.Sequential(*layers)


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(torch.relu(self.conv1(torch.relu(x))))


class ImageEncoder(nn.Module):
    """IMPALA-style CNN: per stage a conv, a max-pool and a residual block; 64-128 px input."""

    def __init__(
        self,
        channels: tuple[int, ...] = (16, 32, 32),
        out_dim: int = 256,
        image_hw: tuple[int, int] = (64, 64),
    ) -> None:
        super().__init__()
        stages, in_ch = [], 3
        for ch in channels:
            stages += [
                nn.Conv2d(in_ch, ch, 3, padding=1),
                nn.MaxPool2d(3, stride=2, padding=1),
                ResidualBlock(ch),
            ]
            in_ch = ch
        self.stages = nn.Sequential(*stages)
        with torch.no_grad():
            flat = self.stages(torch.zeros(1, 3, *image_hw)).numel()
        self.head = nn.Sequential(nn.ReLU(), nn.Flatten(), nn.Linear(flat, out_dim), nn.ReLU())
        self.out_dim = out_dim

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images: uint8 [B, H, W, 3] -> features [B, out_dim]."""
        x = images.permute(0, 3, 1, 2).float() / 255.0
        return self.head(self.stages(x))
