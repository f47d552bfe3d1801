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
from policies.vla.openvla.model import STOP_TOKEN, OpenVLA, Prompt
from policies.vla.weights import CheckpointError

PLACEHOLDER_TOKEN = 1  # OFT's placeholder ids (their embeddings are zeroed anyway)
HEAD_FILES = {
    "action_head": "action_head--*_checkpoint.pt",
    "proprio_projector": "proprio_projector--*_checkpoint.pt",
}
FILM_FILE = "vision_backbone--*_checkpoint.pt"  # OFT with FiLM: the whole vision backbone, FiLM'd
UNSUPPORTED_FILES = {
    "noisy_action_projector--*_checkpoint.pt": "OFT's diffusion head is not supported (only L1 regression)",
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
    patterns = [*HEAD_FILES.values(), FILM_FILE, *UNSUPPORTED_FILES]
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


@dataclass(frozen=True)
class FiLMLayout:
    """How a FiLM vision backbone file stores its linears: OFT's ``finetune.py`` adds LoRA to every
    linear (``all-linear``, ``lora_alpha = min(rank, 16)``) before wrapping the ViT blocks in FiLM,
    so the file holds ``base_layer`` / ``lora_A`` / ``lora_B`` for those (and its deploy code expects
    them); a file written without LoRA holds plain weights."""

    lora_modules: tuple[str, ...] = ()  # upstream module paths stored as LoRA
    lora_rank: int = 0


def film_file(folder: Path) -> Path | None:
    return _one(Path(folder), FILM_FILE)


_BLOCK = re.compile(r"\.blocks\.(\d+)\.block\.")
_FILM = re.compile(r"\.blocks\.(\d+)\.(scale|shift)\.")


def _film_to_ours(key: str) -> str:
    return _FILM.sub(r".blocks.\1.film.\2.", _BLOCK.sub(r".blocks.\1.", key))


def _ours_to_film(key: str) -> str:
    key = re.sub(r"\.blocks\.(\d+)\.film\.(scale|shift)\.", r".blocks.\1.\2.", key)
    return re.sub(r"\.blocks\.(\d+)\.(?!scale\.|shift\.)", r".blocks.\1.block.", key)


def read_film_backbone(path: Path, model: nn.Module) -> tuple[dict[str, torch.Tensor], FiLMLayout]:
    """OFT's ``vision_backbone--*_checkpoint.pt`` (``FiLMedPrismaticVisionBackbone.state_dict()``: each
    ViT block as ``blocks.N.block.*`` beside its ``blocks.N.scale`` / ``shift``) under ``model``'s names
    (``vision_backbone.*``, every one of them), LoRA merged in as peft merges it."""
    state = load_component(path)
    plain = {k: v for k, v in state.items() if ".lora_A." not in k and ".lora_B." not in k}
    lora_a = {k.split(".lora_A.")[0]: v for k, v in state.items() if ".lora_A." in k}
    lora_b = {k.split(".lora_B.")[0]: v for k, v in state.items() if ".lora_B." in k}
    if set(lora_a) != set(lora_b):
        odd = sorted(set(lora_a) ^ set(lora_b))[0]
        raise CheckpointError(f"{path}: {odd} has only one of lora_A / lora_B")
    ranks = {a.shape[0] for a in lora_a.values()}
    if len(ranks) > 1:
        raise CheckpointError(f"{path}: LoRA ranks differ between layers ({sorted(ranks)})")
    rank = ranks.pop() if ranks else 0
    ours = {k: v for k, v in model.state_dict(keep_vars=True).items() if k.startswith("vision_backbone.")}
    tensors: dict[str, torch.Tensor] = {}
    for key, tensor in plain.items():
        if ".base_layer." in key:
            module, leaf = key.split(".base_layer.")
            if leaf == "weight" and module in lora_a:
                scaling = min(rank, 16) / rank  # OFT's lora_alpha = min(rank, 16)
                delta = lora_b[module].float() @ lora_a[module].float()
                tensor = (tensor.float() + scaling * delta).to(tensor.dtype)
            key = f"{module}.{leaf}"
        name = _film_to_ours(key)
        if name not in ours:
            raise CheckpointError(f"{path}: unexpected key {key} (not in a FiLM'd Prismatic vision backbone)")
        if tuple(tensor.shape) != tuple(ours[name].shape):
            raise CheckpointError(
                f"{path}: {key} has shape {list(tensor.shape)}, the model wants {list(ours[name].shape)}"
            )
        tensors[name] = tensor
    missing = sorted(set(ours) - set(tensors))
    if missing:
        raise CheckpointError(f"{path}: missing {_ours_to_film(missing[0])} ({len(missing)} in all)")
    return tensors, FiLMLayout(tuple(sorted(lora_a)), rank)


def film_backbone_state(model: nn.Module, layout: FiLMLayout) -> dict[str, torch.Tensor]:
    """The model's FiLM vision backbone as OFT's file holds it (the inverse of
    :func:`read_film_backbone`): LoRA'd linears as ``base_layer`` beside an adapter of the source's rank
    that adds nothing (``lora_B`` zero)."""
    out: dict[str, torch.Tensor] = {}
    lora = set(layout.lora_modules)
    generator = torch.Generator().manual_seed(0)
    for name, tensor in model.state_dict().items():
        if not name.startswith("vision_backbone."):
            continue
        key = _ours_to_film(name)
        module, leaf = key.rsplit(".", 1)
        tensor = tensor.detach().cpu().contiguous().clone()
        if module in lora:
            out[f"{module}.base_layer.{leaf}"] = tensor
            if leaf == "weight":
                # as peft's "gaussian" init (B zero: no change), so upstream can train on from here
                a = torch.randn(layout.lora_rank, tensor.shape[1], generator=generator) / layout.lora_rank
                out[f"{module}.lora_A.default.weight"] = a.to(tensor.dtype)
                out[f"{module}.lora_B.default.weight"] = torch.zeros(
                    tensor.shape[0], layout.lora_rank, dtype=tensor.dtype
                )
        else:
            out[key] = tensor
    return out


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
