"""OpenVLA-OFT: a whole chunk in one pass (parallel decoding), read by an L1-regression head.

As OFT's ``predict_action`` (moojink/openvla-oft, ``prismatic/extern/hf/modeling_prismatic.py``):
the prompt (ending in 29871) is followed by ``chunk * action_dim`` placeholder tokens whose
embeddings are zeroed and by the STOP token (``</s>``, id 2); the proprio token (``ProprioProjector``
on the q01/q99-normalised state) follows the image patches; attention is bidirectional (OFT's
transformers fork drops the causal mask). The hidden states from the prompt's last position on,
``chunk * action_dim`` of them, go to ``L1RegressionActionHead`` (an ``MLPResNet`` over
``action_dim * D`` per step), whose output is un-normalised with ``q01`` / ``q99`` (+1e-8, as OFT).

The heads come as ``action_head--<step>_checkpoint.pt`` and ``proprio_projector--<step>_checkpoint.pt``
beside the model, with ``dataset_statistics.json``. They are pickles: read with
``torch.load(weights_only=True)``, which executes nothing, and every value must be a tensor.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from policies.vla.openvla.checkpoint import ActionStats
from policies.vla.openvla.model import OpenVLA, Prompt
from policies.vla.weights import CheckpointError

PLACEHOLDER_TOKEN = 1  # OFT's placeholder ids (their embeddings are zeroed anyway)
STOP_TOKEN = 2  # "</s>"
HEAD_FILES = {
    "action_head": "action_head--*_checkpoint.pt",
    "proprio_projector": "proprio_projector--*_checkpoint.pt",
}
UNSUPPORTED_FILES = {
    "noisy_action_projector--*_checkpoint.pt": "OFT's diffusion head is not supported (only L1 regression)",
    "vision_backbone--*_checkpoint.pt": "OFT's FiLM vision backbone is not supported yet",
}


class MLPResNetBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.ffn = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ffn(x)


class MLPResNet(nn.Module):
    def __init__(self, blocks: int, input_dim: int, hidden_dim: int, output_dim: int) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(input_dim)
        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.mlp_resnet_blocks = nn.ModuleList(MLPResNetBlock(hidden_dim) for _ in range(blocks))
        self.layer_norm2 = nn.LayerNorm(hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, output_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = functional.relu(self.fc1(self.layer_norm1(x)))
        for block in self.mlp_resnet_blocks:
            x = block(x)
        return self.fc2(self.layer_norm2(x))


class L1RegressionActionHead(nn.Module):
    """[B, chunk * A, D] action hidden states -> [B, chunk, A] normalised actions."""

    def __init__(self, llm_dim: int, action_dim: int, hidden_dim: int | None = None, blocks: int = 2) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.model = MLPResNet(blocks, llm_dim * action_dim, hidden_dim or llm_dim, action_dim)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model(hidden.reshape(hidden.shape[0], -1, self.action_dim * hidden.shape[-1]))


class ProprioProjector(nn.Module):
    def __init__(self, llm_dim: int, proprio_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(proprio_dim, llm_dim)
        self.fc2 = nn.Linear(llm_dim, llm_dim)

    def forward(self, proprio: torch.Tensor) -> torch.Tensor:
        return self.fc2(functional.gelu(self.fc1(proprio)))


def load_component(path: Path) -> dict[str, torch.Tensor]:
    """An OFT component's state dict: ``weights_only`` (no code runs), tensors only, ``module.`` stripped."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{path}: not a state dict of tensors (loaded with weights_only=True: {reason})"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(
            f"{path}: holds something other than tensors (an OFT component is a state dict)"
        )
    return {name.removeprefix("module."): tensor for name, tensor in state.items()}


def _one(folder: Path, pattern: str) -> Path | None:
    found = sorted(folder.glob(pattern), key=lambda p: int(re.sub(r"\D", "", p.name) or 0))
    return found[-1] if found else None


@dataclass
class OFTHeads:
    action_head: L1RegressionActionHead
    proprio_projector: ProprioProjector | None
    norm_stats: dict | None  # dataset_statistics.json, where the folder has it

    @property
    def action_dim(self) -> int:
        return self.action_head.action_dim


def has_oft_heads(folder: Path) -> bool:
    """Whether the folder holds any of OFT's component files (then it must hold the action head)."""
    patterns = [*HEAD_FILES.values(), *UNSUPPORTED_FILES]
    return any(_one(Path(folder), pattern) is not None for pattern in patterns)


def load_heads(folder: Path, llm_dim: int, dtype: torch.dtype = torch.float32) -> OFTHeads:
    """The L1 head (dims from its weights), the proprio projector if present, and the statistics."""
    for pattern, why in UNSUPPORTED_FILES.items():
        if _one(folder, pattern) is not None:
            raise CheckpointError(f"{_one(folder, pattern)}: {why}")
    head_file = _one(folder, HEAD_FILES["action_head"])
    if head_file is None:
        raise CheckpointError(
            f"{folder}: no {HEAD_FILES['action_head']} (an OpenVLA-OFT folder carries its action head)"
        )
    state = load_component(head_file)
    try:
        hidden, flat = state["model.fc1.weight"].shape
        action_dim = state["model.fc2.weight"].shape[0]
    except KeyError as exc:
        raise CheckpointError(f"{head_file}: no {exc} (not an L1RegressionActionHead)") from None
    if flat != llm_dim * action_dim:
        raise CheckpointError(
            f"{head_file}: fc1 takes {flat} inputs, not action_dim {action_dim} x the Llama's {llm_dim}"
        )
    blocks = len({k.split(".")[2] for k in state if k.startswith("model.mlp_resnet_blocks.")})
    head = L1RegressionActionHead(llm_dim, action_dim, hidden, blocks)
    _load(head, state, head_file, dtype)
    projector = None
    proprio_file = _one(folder, HEAD_FILES["proprio_projector"])
    if proprio_file is not None:
        state = load_component(proprio_file)
        if "fc1.weight" not in state:
            raise CheckpointError(f"{proprio_file}: no 'fc1.weight' (not a ProprioProjector)")
        projector = ProprioProjector(llm_dim, state["fc1.weight"].shape[1])
        _load(projector, state, proprio_file, dtype)
    stats_file = folder / "dataset_statistics.json"
    norm_stats = json.loads(stats_file.read_text()) if stats_file.is_file() else None
    return OFTHeads(head, projector, norm_stats)


def _load(module: nn.Module, state: dict[str, torch.Tensor], path: Path, dtype: torch.dtype) -> None:
    own = module.state_dict()
    for name in sorted(set(own) | set(state)):
        if name not in state:
            raise CheckpointError(f"{path}: missing {name}")
        if name not in own:
            raise CheckpointError(f"{path}: unexpected key {name}")
        if own[name].shape != state[name].shape:
            raise CheckpointError(
                f"{path}: {name} has shape {list(state[name].shape)}, expected {list(own[name].shape)}"
            )
    module.load_state_dict({k: v.to(dtype) for k, v in state.items()})


def normalize_proprio(state: np.ndarray, stats: dict) -> np.ndarray:
    """OFT's ``normalize_proprio`` (BOUNDS_Q99): ``2 (x - q01) / (q99 - q01 + 1e-8) - 1`` where ``mask``, clipped."""
    q01, q99 = np.asarray(stats["q01"]), np.asarray(stats["q99"])
    mask = np.asarray(stats.get("mask", np.ones_like(q01, dtype=bool)), bool)
    return np.clip(np.where(mask, 2 * (state - q01) / (q99 - q01 + 1e-8) - 1, state), -1.0, 1.0)


def unnormalize_oft(normalized: np.ndarray, stats: ActionStats) -> np.ndarray:
    """OFT's ``_unnormalize_actions`` (BOUNDS_Q99; +1e-8 on the range, unlike OpenVLA)."""
    return np.where(
        stats.mask, 0.5 * (normalized + 1) * (stats.q99 - stats.q01 + 1e-8) + stats.q01, normalized
    )


def parallel_pass(
    model: OpenVLA, prompt: Prompt, slots: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One bidirectional pass over the prompt, ``slots`` zeroed placeholders and the STOP token.

    Returns the logits [B, slots, V] and hidden states [B, slots, D] of the ``slots`` positions from
    the prompt's last one on (where OFT reads its actions), and that last prompt position's hidden
    state [B, D]."""
    batch, width = prompt.embeds.shape[0], prompt.embeds.shape[-1]
    stop = model.language_model.get_input_embeddings()(
        torch.full((batch, 1), STOP_TOKEN, device=prompt.mask.device)
    )
    zeros = torch.zeros(batch, slots, width, dtype=prompt.embeds.dtype, device=prompt.embeds.device)
    embeds = torch.cat([prompt.embeds, zeros, stop.to(prompt.embeds.dtype)], dim=1)
    ones = torch.ones(batch, slots + 1, dtype=prompt.mask.dtype, device=prompt.mask.device)
    mask = torch.cat([prompt.mask, ones], dim=1)
    positions = torch.cat([prompt.positions, prompt.positions[:, -1:] + ones.cumsum(1)], dim=1)
    logits, _, hidden = model.run(embeds, mask, positions, hidden=True, keep=slots + 2, bidirectional=True)
    start = prompt.embeds.shape[1] - 1  # the prompt's last position (29871), as OFT's slice begins
    return logits[:, :slots], hidden[:, start : start + slots], hidden[:, start]
