"""Handing a finetuned OpenVLA back as upstream's folder: ``model.safetensors`` under upstream's names
and shapes (LoRA merged in), ``config.json`` with its ``norm_stats``, the tokenizer and the image
processor's config; for OFT also its component files (``proprio_projector--<step>_checkpoint.pt``
and, with FiLM, ``vision_backbone--<step>_checkpoint.pt`` from the policy, the action head and
``dataset_statistics.json`` carried over from the source).
upstream's ``AutoModelForVision2Seq.from_pretrained(..., trust_remote_code=True)`` (with its modelling
files added) and our :func:`load_openvla` read the result.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from policies.vla.openvla.oft import film_backbone_state
from policies.vla.openvla.policy import OpenVLAPolicy

PEFT_PREFIX = "base_model.model."


def upstream_state_dict(policy: OpenVLAPolicy) -> dict[str, torch.Tensor]:
    """The model's weights under upstream's names, LoRA adapters merged into their base weights."""
    language_model = policy.model.language_model
    merged = hasattr(language_model, "merge_adapter")
    if merged:
        language_model.merge_adapter()
    try:
        out = {}
        for name, tensor in policy.model.state_dict().items():
            if "lora_" in name:
                continue
            name = name.replace(f"language_model.{PEFT_PREFIX}", "language_model.").replace(
                ".base_layer.", "."
            )
            out[name] = tensor.detach().cpu().contiguous().clone()
        return out
    finally:
        if merged:
            language_model.unmerge_adapter()


def upstream_config(policy: OpenVLAPolicy) -> dict[str, Any]:
    """config.json: the source folder's as written, or (``tiny:``) upstream's fields for the tiny sizes."""
    checkpoint = policy.checkpoint
    if checkpoint.config:
        return {**checkpoint.config, "norm_stats": checkpoint.norm_stats}
    return {
        "model_type": "openvla",
        "architectures": ["OpenVLAForActionPrediction"],
        "arch_specifier": "no-align+fused-gelu-mlp",
        "vision_backbone_id": "dinosiglip-vit-so-224px",
        "llm_backbone_id": "llama2-7b-pure",
        "use_fused_vision_backbone": checkpoint.fused_featurizer is not None,
        "timm_model_ids": ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"],
        "timm_override_act_layers": [None, None],
        "image_sizes": list(checkpoint.image_sizes),
        "image_resize_strategy": checkpoint.resize_strategy,
        "n_action_bins": checkpoint.n_action_bins,
        "pad_to_multiple_of": checkpoint.pad_to_multiple_of,
        "text_config": {"model_type": "llama", **checkpoint.text_config},
        "norm_stats": {TINY_UNNORM_KEY: tiny_stats(policy)},
    }


TINY_UNNORM_KEY = "rlinf_tiny"


def tiny_stats(policy: OpenVLAPolicy) -> dict[str, Any]:
    """Statistics that make a tiny policy's [-1, 1] units the env's: q01 / q99 are the action
    bounds; the proprio ones are the identity on [-1, 1] (a tiny OFT's state goes in as it is)."""
    spec, dims = policy.spec, policy.spec.action.dim
    stats: dict[str, Any] = {"action": {"q01": [float(v) for v in spec.action.low_array()], "q99": [float(v) for v in spec.action.high_array()],
                                        "mask": [True] * dims}}  # fmt: skip
    if policy.proprio is not None:
        stats["proprio"] = {"q01": [-1.0] * spec.state_dim, "q99": [1.0] * spec.state_dim}
    return stats


def tiny_dims(policy: OpenVLAPolicy) -> dict[str, Any]:
    """The dims file a tiny export needs (its config names the real timm ids, as the fixture's does)."""
    c = policy.checkpoint
    vits = {
        "vit_large_patch14_reg4_dinov2.lvd142m": c.featurizer,
        "vit_so400m_patch14_siglip_224": c.fused_featurizer,
    }
    overrides = {
        i: {"embed_dim": d.embed_dim, "depth": d.depth, "num_heads": d.num_heads} for i, d in vits.items()
    }
    return {"text_config": {k: v for k, v in c.text_config.items() if k != "vocab_size"},
            "vocab_size": c.text_config["vocab_size"], "timm_overrides": overrides}  # fmt: skip


def export_openvla(policy: OpenVLAPolicy, folder: str | Path, step: int = 0) -> Path:
    """Write ``policy`` as an upstream OpenVLA (or OFT) folder; returns the folder."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(upstream_state_dict(policy), str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(upstream_config(policy), indent=2))
    policy.tokenizer.save_pretrained(str(folder))
    c = policy.checkpoint
    processor = {
        "image_processor_type": "PrismaticImageProcessor",
        "processor_class": "PrismaticProcessor",
        "image_resize_strategy": c.resize_strategy,
        "use_fused_vision_backbone": c.fused_featurizer is not None,
        "input_sizes": [[3, s, s] for s in c.image_sizes],
        "interpolations": ["bicubic"] * len(c.image_sizes),
        "means": [list(m) for m in c.pixel_means],
        "stds": [list(s) for s in c.pixel_stds],
    }
    (folder / "preprocessor_config.json").write_text(json.dumps(processor, indent=2))
    if not c.config:  # a tiny model: its sizes, which its config's (real) timm ids do not say
        (folder / "tiny_dims.json").write_text(json.dumps(tiny_dims(policy), indent=2))
    if policy.proprio is not None:
        state = {k: v.detach().cpu() for k, v in policy.proprio.state_dict().items()}
        torch.save(state, folder / f"proprio_projector--{step}_checkpoint.pt")
    if policy.film_layout is not None:  # FiLM: OFT reads the vision backbone from its own file
        state = film_backbone_state(policy.model, policy.film_layout)
        torch.save(state, folder / f"vision_backbone--{step}_checkpoint.pt")
    source = c.folder
    if source.is_dir() and source.resolve() != folder.resolve():
        for pattern in ("action_head--*_checkpoint.pt", "dataset_statistics.json"):
            for path in source.glob(pattern):
                shutil.copy2(path, folder / path.name)
    return folder
