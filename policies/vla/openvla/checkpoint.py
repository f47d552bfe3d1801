"""Reading an OpenVLA folder as upstream writes it (``model_type: openvla``), running none of its code.

``config.json`` names the timm ViTs (``timm_model_ids``, ``image_sizes``, ``use_fused_vision_backbone``),
the Llama (``text_config``, completed with transformers' Llama defaults as upstream does), the action
bins (``n_action_bins``, ``pad_to_multiple_of``) and the datasets' statistics (``norm_stats``, one per
``unnorm_key``). The weights are ``model.safetensors`` (or its shards) under upstream's names. A dims
file (``tiny_dims.json``) may override timm's sizes where the weights are smaller than the ids say.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policies.vla.openvla.vision import ViTDims, vit_dims
from policies.vla.weights import CheckpointError, load_key_for_key
from policies.vla.weights import read_json as _json

MODEL_TYPES = ("openvla",)
LLM_TYPES = ("llama",)
RESIZE_STRATEGIES = ("resize-naive", "letterbox", "resize-crop")
# Each backbone's pixel normalisation where preprocessor_config.json is absent (Prismatic's defaults).
PIXEL_STATS = {
    "vit_large_patch14_reg4_dinov2.lvd142m": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "vit_so400m_patch14_siglip_224": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
}


@dataclass(frozen=True)
class ActionStats:
    """One dataset's action statistics (``norm_stats[unnorm_key]["action"]``)."""

    q01: np.ndarray
    q99: np.ndarray
    mask: np.ndarray  # True: un-normalise from [-1, 1]; False (the gripper): pass through

    @property
    def dim(self) -> int:
        return len(self.q01)


@dataclass(frozen=True)
class OpenVLACheckpoint:
    folder: Path
    featurizer: ViTDims
    fused_featurizer: ViTDims | None
    text_config: dict[str, Any]  # LlamaConfig kwargs
    n_action_bins: int
    pad_to_multiple_of: int
    resize_strategy: str
    image_sizes: tuple[int, ...]
    pixel_means: tuple[tuple[float, ...], ...]  # per backbone, from preprocessor_config.json
    pixel_stds: tuple[tuple[float, ...], ...]
    norm_stats: dict[str, Any]
    config: dict[str, Any]  # config.json as written, for saving it back

    @property
    def vocab_size(self) -> int:
        """The tokenizer's vocabulary without the padding rows (32000 for Llama-2): bins count down from it."""
        return int(self.text_config["vocab_size"]) - self.pad_to_multiple_of

    def unnorm_keys(self) -> list[str]:
        return sorted(self.norm_stats)

    def action_stats(self, unnorm_key: str | None) -> ActionStats:
        """Upstream's ``_check_unnorm_key``: the only key when there is one, else the one named."""
        keys = self.unnorm_keys()
        if not unnorm_key:
            if len(keys) != 1:
                raise CheckpointError(
                    f"{self.folder}: trained on {len(keys)} datasets, name one with policy.vla.unnorm_key; "
                    f"keys: {keys}"
                )
            unnorm_key = keys[0]
        if unnorm_key not in self.norm_stats:
            raise CheckpointError(f"{self.folder}: no norm_stats for unnorm_key {unnorm_key!r}; keys: {keys}")
        action = self.norm_stats[unnorm_key].get("action", {})
        try:
            q01, q99 = np.asarray(action["q01"], np.float64), np.asarray(action["q99"], np.float64)
        except KeyError as exc:
            raise CheckpointError(f"{self.folder}: norm_stats[{unnorm_key!r}].action has no {exc}") from None
        mask = np.asarray(action.get("mask", np.ones_like(q01, dtype=bool)), bool)
        return ActionStats(q01=q01, q99=q99, mask=mask)


def is_openvla_folder(folder: str | Path) -> bool:
    config = Path(folder) / "config.json"
    return config.is_file() and _json(config).get("model_type") in MODEL_TYPES


def read_checkpoint(folder: str | Path, dims_file: str | Path | None = None) -> OpenVLACheckpoint:
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder}: not a checkpoint folder (no config.json)")
    config = _json(folder / "config.json")
    if config.get("model_type") not in MODEL_TYPES:
        raise CheckpointError(
            f"{folder}: model_type {config.get('model_type')!r} is not OpenVLA ({list(MODEL_TYPES)})"
        )
    dims = _json(Path(dims_file)) if dims_file else {}
    text_config = {**config.get("text_config", {}), **dims.get("text_config", {})}
    if "vocab_size" in dims:
        text_config["vocab_size"] = dims["vocab_size"]
    llm_type = text_config.pop("model_type", "llama")
    if llm_type not in LLM_TYPES:
        raise CheckpointError(
            f"{folder}: text_config.model_type {llm_type!r} is not one of {list(LLM_TYPES)}"
        )
    for key in ("torch_dtype", "dtype"):
        text_config.pop(key, None)
    timm_ids = list(config.get("timm_model_ids", []))
    sizes = list(config.get("image_sizes", []))
    fused = bool(config.get("use_fused_vision_backbone"))
    if len(timm_ids) != 1 + fused or len(sizes) != len(timm_ids):
        raise CheckpointError(
            f"{folder}: use_fused_vision_backbone={fused} wants {1 + fused} timm_model_ids and image_sizes, "
            f"config.json has {timm_ids} and {sizes}"
        )
    overrides = dims.get("timm_overrides", {})
    try:
        vits = [vit_dims(i, s, overrides.get(i)) for i, s in zip(timm_ids, sizes, strict=True)]
    except ValueError as exc:
        raise CheckpointError(f"{folder}: {exc}") from None
    if any(act for act in config.get("timm_override_act_layers", []) or []):
        raise CheckpointError(f"{folder}: timm_override_act_layers is not supported")
    strategy = config.get("image_resize_strategy", "resize-naive")
    if strategy not in RESIZE_STRATEGIES:
        raise CheckpointError(
            f"{folder}: image_resize_strategy {strategy!r} is not one of {list(RESIZE_STRATEGIES)}"
        )
    processor = folder / "preprocessor_config.json"
    stats = _json(processor) if processor.is_file() else {}
    means = stats.get("means") or [PIXEL_STATS[i][0] for i in timm_ids]
    stds = stats.get("stds") or [PIXEL_STATS[i][1] for i in timm_ids]
    return OpenVLACheckpoint(
        folder=folder,
        image_sizes=tuple(int(s) for s in sizes),
        pixel_means=tuple(tuple(float(v) for v in m) for m in means),
        pixel_stds=tuple(tuple(float(v) for v in s) for s in stds),
        featurizer=vits[0],
        fused_featurizer=vits[1] if fused else None,
        text_config=text_config,
        n_action_bins=int(config.get("n_action_bins", 256)),
        pad_to_multiple_of=int(config.get("pad_to_multiple_of", 0)),
        resize_strategy=strategy,
        norm_stats=config.get("norm_stats", {}),
        config=config,
    )


def weight_files(folder: Path) -> list[Path]:
    """``model.safetensors``, or the shards its index names."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return sorted({folder / name for name in _json(index).get("weight_map", {}).values()})
    single = folder / "model.safetensors"
    if not single.is_file():
        raise CheckpointError(f"{folder}: no model.safetensors (nor model.safetensors.index.json)")
    return [single]


def load_weights(
    model: torch.nn.Module,
    folder: Path,
    dtype: torch.dtype,
    device: str | torch.device,
    given: dict[str, torch.Tensor] | None = None,
) -> None:
    """Fill ``model`` (parameters on meta) key for key, each tensor read once in ``dtype``; ``given``
    (OFT's FiLM vision backbone) stands in for the folder's tensors of the same names."""
    hint = " (weights smaller than the timm ids say? pass a dims file with --dims / policy.vla.dims)"
    load_key_for_key(model, weight_files(folder), dtype, device, shape_hint=hint, given=given)
