"""OpenVLA's inputs and outputs: the prompt, the 6-channel pixels, and the action-token bins.

Bins (upstream's ``ActionTokenizer`` and ``predict_action``): with ``V = vocab_size - pad_to_multiple_of``
(32000 for Llama-2), an action in [-1, 1] is ``digitize(a, linspace(-1, 1, n_bins))`` -> token
``V - digitized`` (ids ``V - n_bins .. V - 1``), and a token decodes to
``bin_centers[clip(V - token - 1, 0, n_bins - 2)]``: the centres decrease as the id grows.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional

from policies.vla.openvla.checkpoint import ActionStats

PROMPT = "In: What action should the robot take to {instruction}?\nOut:"
ACTION_START_TOKEN = 29871  # Llama-2's "▁": predict_action appends it when the prompt lacks it


def prompt(instruction: str) -> str:
    """OpenVLA's prompt (``PurePromptBuilder`` with its question); the instruction goes in as given."""
    return PROMPT.format(instruction=instruction)


def tokenize(
    tokenizer: object, instructions: list[str], action_start: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids [B, L] and mask of the prompts, each ending in :data:`ACTION_START_TOKEN`
    (``action_start``: a Llama-2 vocabulary; tiny tokenizers have no such id)."""
    rows = [tokenizer(prompt(text)).input_ids for text in instructions]
    if action_start:
        rows = [ids if ids[-1] == ACTION_START_TOKEN else [*ids, ACTION_START_TOKEN] for ids in rows]
    length = max(len(ids) for ids in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tokens = torch.tensor([[pad] * (length - len(ids)) + ids for ids in rows])
    mask = torch.tensor([[0] * (length - len(ids)) + [1] * len(ids) for ids in rows])
    return tokens, mask


def _resize(images: torch.Tensor, size: int, strategy: str, mean: tuple[float, ...]) -> torch.Tensor:
    """float [B, 3, H, W] in [0, 1] to [B, 3, size, size] (bicubic, antialiased), by Prismatic's strategy."""
    height, width = images.shape[-2:]
    if strategy == "letterbox":  # pad to a square with the mean colour, then resize
        side = max(height, width)
        top, left = (side - height) // 2, (side - width) // 2
        canvas = (
            torch.tensor(mean, dtype=images.dtype).view(1, 3, 1, 1).expand(images.shape[0], 3, side, side)
        )
        canvas = canvas.clone()
        canvas[..., top : top + height, left : left + width] = images
        images = canvas
    elif strategy == "resize-crop":  # shorter side to size, then a centre crop
        scale = size / min(height, width)
        new = (max(size, round(height * scale)), max(size, round(width * scale)))
        images = functional.interpolate(images, size=new, mode="bicubic", antialias=True, align_corners=False)
        top, left = (new[0] - size) // 2, (new[1] - size) // 2
        return images[..., top : top + size, left : left + size].clamp(0, 1)
    if images.shape[-2:] == (size, size):
        return images
    resized = functional.interpolate(
        images, size=(size, size), mode="bicubic", antialias=True, align_corners=False
    )
    return resized.clamp(0, 1)


def pixels(
    images: torch.Tensor,
    sizes: tuple[int, ...],
    strategy: str,
    means: tuple[tuple[float, ...], ...],
    stds: tuple[tuple[float, ...], ...],
) -> torch.Tensor:
    """uint8 [B, H, W, 3] (or [B, 3, H, W]) to Prismatic's pixels: one normalised copy per backbone,
    stacked on the channels ([B, 6, S, S] when fused: DINOv2's ImageNet copy, then SigLIP's 0.5 / 0.5)."""
    if images.shape[-1] == 3 and images.shape[1] != 3:
        images = images.permute(0, 3, 1, 2)
    images = images.float() / 255.0
    out = []
    for size, mean, std in zip(sizes, means, stds, strict=True):
        resized = _resize(images, size, strategy, mean)
        out.append((resized - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1))
    return torch.cat(out, dim=1)


def bin_centers(n_bins: int) -> np.ndarray:
    bins = np.linspace(-1, 1, n_bins)
    return (bins[:-1] + bins[1:]) / 2.0


def tokens_to_normalized(tokens: np.ndarray | torch.Tensor, vocab_size: int, n_bins: int) -> np.ndarray:
    """Action token ids to normalised actions in [-1, 1] (float64), exactly as ``predict_action``."""
    tokens = np.asarray(tokens.cpu() if isinstance(tokens, torch.Tensor) else tokens)
    centers = bin_centers(n_bins)
    return centers[np.clip(vocab_size - tokens - 1, 0, centers.shape[0] - 1)]


def normalized_to_tokens(actions: np.ndarray, vocab_size: int, n_bins: int) -> np.ndarray:
    """Normalised actions to token ids, as upstream's ``ActionTokenizer`` (for SFT labels)."""
    bins = np.linspace(-1, 1, n_bins)
    return vocab_size - np.digitize(np.clip(actions, -1.0, 1.0), bins)


def unnormalize(normalized: np.ndarray, stats: ActionStats) -> np.ndarray:
    """``0.5 (n + 1) (q99 - q01) + q01`` where ``mask``, else ``n`` (the gripper passes through)."""
    if normalized.shape[-1] != stats.dim:
        raise ValueError(f"{normalized.shape[-1]} action dims, the checkpoint's statistics have {stats.dim}")
    return np.where(stats.mask, 0.5 * (normalized + 1) * (stats.q99 - stats.q01) + stats.q01, normalized)


def normalize(actions: np.ndarray, stats: ActionStats) -> np.ndarray:
    """The inverse of :func:`unnormalize` (clipped to [-1, 1]), for SFT labels."""
    scaled = 2 * (actions - stats.q01) / np.maximum(stats.q99 - stats.q01, 1e-8) - 1
    return np.clip(np.where(stats.mask, scaled, actions), -1.0, 1.0)
