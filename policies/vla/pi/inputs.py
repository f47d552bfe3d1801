"""What the π families do to an observation before the model and to the chunk after it, as
upstream does it: images resized with padding and mapped to [-1, 1], state and actions normalised
(z-score for π0, quantiles for π0.5) and padded to the checkpoint's ``max_*_dim``, the prompt
(π0: the task and a newline; π0.5: ``Task: …, State: <256-bin digits>;\\nAction: ``) tokenised and
right-padded to the checkpoint's length."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional


@dataclass(frozen=True)
class Normalization:
    """One feature's statistics and how upstream applies them (``style``: whose epsilon rule)."""

    mode: str  # "mean_std" | "quantiles" | "identity"
    stats: dict[str, torch.Tensor]
    style: str = "lerobot"  # "lerobot" (eps only where it avoids 0 / 0) or "openpi" (+1e-6 always)
    eps: float = 1e-8

    def __post_init__(self) -> None:
        needs = {"mean_std": ("mean", "std"), "quantiles": ("q01", "q99"), "identity": ()}
        if self.mode not in needs:
            raise ValueError(f"normalisation mode {self.mode!r}; known: {sorted(needs)}")
        missing = [k for k in needs[self.mode] if k not in self.stats]
        if missing:
            raise ValueError(f"{self.mode} normalisation needs the statistics {missing}")

    @property
    def dim(self) -> int | None:
        return None if self.mode == "identity" else int(next(iter(self.stats.values())).shape[-1])

    def _stat(self, name: str, like: torch.Tensor) -> torch.Tensor:
        return self.stats[name].to(like.device, like.dtype)

    def _quantile_span(self, like: torch.Tensor) -> torch.Tensor:
        span = self._stat("q99", like) - self._stat("q01", like)
        if self.style == "openpi":
            return span + 1e-6
        return torch.where(span == 0, torch.full_like(span, self.eps), span)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "mean_std":
            eps = 1e-6 if self.style == "openpi" else self.eps
            return (x - self._stat("mean", x)) / (self._stat("std", x) + eps)
        if self.mode == "quantiles":
            return 2.0 * (x - self._stat("q01", x)) / self._quantile_span(x) - 1.0
        return x

    def unnormalize(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "mean_std":
            std = self._stat("std", x) + (1e-6 if self.style == "openpi" else 0.0)
            return x * std + self._stat("mean", x)
        if self.mode == "quantiles":
            return (x + 1.0) * self._quantile_span(x) / 2.0 + self._stat("q01", x)
        return x


def pad_to(x: torch.Tensor, width: int) -> torch.Tensor:
    """Zero-pad the last dimension to ``width``."""
    return functional.pad(x, (0, width - x.shape[-1])) if x.shape[-1] < width else x


def resize_with_pad(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """[B, 3, h, w] in [0, 1] -> [B, 3, height, width]: bilinear resize keeping the aspect ratio,
    then black bars centred around it (openpi's ``resize_with_pad_torch``)."""
    _, _, h, w = images.shape
    if (h, w) == (height, width):
        return images
    ratio = max(w / width, h / height)
    new_h, new_w = int(h / ratio), int(w / ratio)
    resized = functional.interpolate(images, size=(new_h, new_w), mode="bilinear", align_corners=False).clamp(
        0.0, 1.0
    )
    top, left = (height - new_h) // 2, (width - new_w) // 2
    return functional.pad(resized, (left, width - new_w - left, top, height - new_h - top), value=0.0)


def siglip_pixels(images_uint8: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 [B, 3, H, W] (or [B, H, W, 3]) -> float [B, 3, size, size] in [-1, 1]."""
    x = images_uint8
    if x.shape[-1] == 3 and x.shape[1] != 3:
        x = x.permute(0, 3, 1, 2)
    x = resize_with_pad(x.float() / 255.0, size, size)
    return x * 2.0 - 1.0


def discretize_state(state: np.ndarray) -> np.ndarray:
    """A normalised state in [-1, 1] -> bins 0..255 (openpi's tokenizer; beyond [-1, 1] clips to
    the end bins the way ``np.digitize`` does)."""
    return np.digitize(state, bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1


def pi0_prompt(task: str, layout: str) -> str:
    """π0's prompt: LeRobot appends a newline; openpi cleans the text and then appends one."""
    if layout == "openpi":
        return task.strip().replace("_", " ").replace("\n", " ") + "\n"
    return task if task.endswith("\n") else task + "\n"


def pi05_prompt(task: str, normalized_state: np.ndarray) -> str:
    cleaned = task.strip().replace("_", " ").replace("\n", " ")
    digits = " ".join(map(str, discretize_state(normalized_state)))
    return f"Task: {cleaned}, State: {digits};\nAction: "


def tokenize(tokenizer, prompts: list[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded to ``max_length`` and truncated, as both upstreams do: ids and bool mask."""
    batch = tokenizer(
        prompts,
        padding="max_length",
        max_length=max_length,
        truncation=True,
        return_tensors="pt",
        padding_side="right",
    )
    return batch["input_ids"], batch["attention_mask"].bool()
