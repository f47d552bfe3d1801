"""Sizes of a π model: the PaliGemma (SigLIP + Gemma) prefix, the Gemma action expert, and the
flow's chunk and padding. Upstream configs name Gemma variants (``gemma_2b``, ``gemma_300m``);
a dims file (``--dims``, the fixtures' ``tiny_dims.json`` format) overrides them where the
weights are of other sizes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class GemmaDims:
    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int


# openpi's `gemma.get_config` (the variants its checkpoints use).
GEMMA_VARIANTS = {
    "gemma_2b": GemmaDims(width=2048, depth=18, mlp_dim=16_384, num_heads=8, num_kv_heads=1, head_dim=256),
    "gemma_300m": GemmaDims(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256),
}


@dataclass(frozen=True)
class SiglipDims:
    """SigLIP so400m/14 at 224 px, PaliGemma's vision tower."""

    hidden_size: int = 1152
    intermediate_size: int = 4304
    num_hidden_layers: int = 27
    num_attention_heads: int = 16
    patch_size: int = 14
    image_size: int = 224

    @property
    def tokens_per_image(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class PiDims:
    family: str  # "pi0" or "pi05"
    vlm: GemmaDims = GEMMA_VARIANTS["gemma_2b"]
    expert: GemmaDims = GEMMA_VARIANTS["gemma_300m"]
    vision: SiglipDims = field(default_factory=SiglipDims)
    projection_dim: int = 2048
    vocab_size: int = 257_152
    chunk_size: int = 50
    max_state_dim: int = 32
    max_action_dim: int = 32
    num_inference_steps: int = 10
    min_period: float = 4e-3
    max_period: float = 4.0

    def __post_init__(self) -> None:
        if self.family not in ("pi0", "pi05"):
            raise ValueError(f"family must be 'pi0' or 'pi05', got {self.family!r}")
        joint = ("depth", "num_heads", "num_kv_heads", "head_dim")
        if any(getattr(self.vlm, k) != getattr(self.expert, k) for k in joint):
            raise ValueError(
                "the PaliGemma and the action expert attend jointly: they must share depth, heads, "
                f"kv heads and head_dim (got {self.vlm} and {self.expert})"
            )

    @property
    def image_token_id(self) -> int:
        """The placeholder id of image positions in the prompt (one past the vocabulary, as
        transformers' PI0 uses; it is never embedded)."""
        return self.vocab_size


def variant(name: str, where: str) -> GemmaDims:
    if name not in GEMMA_VARIANTS:
        raise ValueError(f"{where}: unknown Gemma variant {name!r}; known: {sorted(GEMMA_VARIANTS)}")
    return GEMMA_VARIANTS[name]


def with_dims_file(dims: PiDims, path: str | Path | None) -> PiDims:
    """``dims`` with the sizes a ``tiny_dims.json``-style file gives (its other keys ignored)."""
    if path is None:
        return dims
    try:
        given: dict[str, Any] = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--dims {path}: cannot read it as JSON ({exc})") from None
    changes: dict[str, Any] = {}
    for key, name in (("paligemma", "vlm"), ("action_expert", "expert")):
        if key in given:
            changes[name] = GemmaDims(**given[key])
    if "siglip" in given:
        changes["vision"] = SiglipDims(**given["siglip"])
    for key in ("projection_dim", "vocab_size", "chunk_size", "max_state_dim", "max_action_dim"):
        if key in given:
            changes[key] = int(given[key])
    return replace(dims, **changes)
