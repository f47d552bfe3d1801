"""Prismatic's vision backbone: timm ViTs by timm's own parameter names, features from the
second-to-last block.

OpenVLA builds its featurizers with ``timm.create_model`` (timm 0.9.x) and reads patches with
``get_intermediate_layers(n={depth - 2})``, without the final norm and without the prefix tokens. The
last block, the final norm and SigLIP's attention-pool head are stored in every checkpoint but never
run: they are built here so a checkpoint loads and saves key for key, and they stay frozen.

timm itself is not a dependency: it imports torchvision, whose PyPI wheel is the CUDA build and does
not load beside the CPU torch. The modules below follow timm's ``VisionTransformer`` (pre-norm blocks,
fused qkv, LayerScale renamed ``scale_factor`` as Prismatic does, LayerNorm eps 1e-6, exact GELU).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional

LAYER_NORM_EPS = 1e-6


@dataclass(frozen=True)
class ViTDims:
    """One timm ViT as Prismatic builds it (``img_size`` from the config, ``num_classes=0``)."""

    embed_dim: int
    depth: int
    num_heads: int
    mlp_ratio: float = 4.0
    patch_size: int = 14
    image_size: int = 224
    class_token: bool = True
    reg_tokens: int = 0
    layer_scale: bool = False  # DINOv2: LayerScale after attention and MLP
    no_embed_class: bool = False  # DINOv2: the position embedding covers the patches only
    attention_pool: bool = False  # SigLIP: the "map" head (stored, never run by OpenVLA)

    @property
    def mlp_dim(self) -> int:
        return int(self.embed_dim * self.mlp_ratio)

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def num_prefix_tokens(self) -> int:
        return int(self.class_token) + self.reg_tokens


# The timm ids Prismatic's vision backbones name (prismatic/models/backbones/vision), at timm's sizes.
TIMM_VITS = {
    "vit_large_patch14_reg4_dinov2.lvd142m": ViTDims(
        1024, 24, 16, reg_tokens=4, layer_scale=True, no_embed_class=True
    ),
    "vit_so400m_patch14_siglip_224": ViTDims(
        1152, 27, 16, mlp_ratio=3.7362, class_token=False, attention_pool=True
    ),
}


def vit_dims(timm_id: str, image_size: int, overrides: dict | None = None) -> ViTDims:
    """The dims of ``timm_id`` at ``image_size``; ``overrides`` are timm kwargs (embed_dim, depth, num_heads)."""
    if timm_id not in TIMM_VITS:
        raise ValueError(f"vision backbone {timm_id!r} is not one of {sorted(TIMM_VITS)}")
    known = {"embed_dim", "depth", "num_heads", "mlp_ratio"}
    unknown = sorted(set(overrides or {}) - known)
    if unknown:
        raise ValueError(f"timm override {unknown[0]!r} for {timm_id} is not one of {sorted(known)}")
    return dataclasses.replace(TIMM_VITS[timm_id], image_size=image_size, **(overrides or {}))


class PatchEmbed(nn.Module):
    def __init__(self, dims: ViTDims) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dims.embed_dim, dims.patch_size, stride=dims.patch_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(images).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, dims: ViTDims) -> None:
        super().__init__()
        self.num_heads = dims.num_heads
        self.qkv = nn.Linear(dims.embed_dim, 3 * dims.embed_dim)
        self.proj = nn.Linear(dims.embed_dim, dims.embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, width // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = functional.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, width))


class Mlp(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(functional.gelu(self.fc1(x)))


class LayerScale(nn.Module):
    """timm's LayerScale with its ``gamma`` named ``scale_factor``, as Prismatic patches it."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.scale_factor = nn.Parameter(torch.full((width,), 1e-5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale_factor


class FiLM(nn.Module):
    """OpenVLA-OFT's language conditioning of one ViT block (``FiLMedVisionTransformerBlock``):
    ``x * (1 + gamma) + beta`` between attention and MLP, with ``gamma`` / ``beta`` projected from the
    average embedding of the prompt's tokens (the same for every patch)."""

    def __init__(self, llm_dim: int, vision_dim: int) -> None:
        super().__init__()
        self.scale = nn.Linear(llm_dim, vision_dim)
        self.shift = nn.Linear(llm_dim, vision_dim)

    def forward(self, x: torch.Tensor, language: torch.Tensor) -> torch.Tensor:
        return x * (1 + self.scale(language)[:, None]) + self.shift(language)[:, None]


class Block(nn.Module):
    def __init__(self, dims: ViTDims) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dims.embed_dim, eps=LAYER_NORM_EPS)
        self.attn = Attention(dims)
        self.ls1 = LayerScale(dims.embed_dim) if dims.layer_scale else nn.Identity()
        self.norm2 = nn.LayerNorm(dims.embed_dim, eps=LAYER_NORM_EPS)
        self.mlp = Mlp(dims.embed_dim, dims.mlp_dim)
        self.ls2 = LayerScale(dims.embed_dim) if dims.layer_scale else nn.Identity()
        self.film: FiLM | None = None  # OFT with FiLM: set by PrismaticVisionBackbone.add_film

    def forward(self, x: torch.Tensor, language: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))
        if self.film is not None:
            x = self.film(x, language)
        return x + self.ls2(self.mlp(self.norm2(x)))


class StoredAttentionPool(nn.Module):
    """The parameters of timm's ``AttentionPoolLatent`` (SigLIP's head): loaded and saved, never run."""

    def __init__(self, dims: ViTDims) -> None:
        super().__init__()
        width = dims.embed_dim
        self.latent = nn.Parameter(torch.zeros(1, 1, width))
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * width)
        self.proj = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.mlp = Mlp(width, dims.mlp_dim)


class VisionTransformer(nn.Module):
    """timm's ``VisionTransformer`` as Prismatic uses it: ``forward`` gives the patch features of the
    second-to-last block, [B, num_patches, embed_dim]."""

    def __init__(self, dims: ViTDims) -> None:
        super().__init__()
        self.dims = dims
        width = dims.embed_dim
        self.patch_embed = PatchEmbed(dims)
        if dims.class_token:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        if dims.reg_tokens:
            self.reg_token = nn.Parameter(torch.zeros(1, dims.reg_tokens, width))
        positions = dims.num_patches + (0 if dims.no_embed_class else dims.num_prefix_tokens)
        self.pos_embed = nn.Parameter(torch.zeros(1, positions, width))
        self.blocks = nn.ModuleList(Block(dims) for _ in range(dims.depth))
        self.norm = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        if dims.attention_pool:
            self.attn_pool = StoredAttentionPool(dims)

    @property
    def feature_block(self) -> int:
        """The block whose output Prismatic reads (``get_intermediate_layers(n={depth - 2})``)."""
        return len(self.blocks) - 2

    def stored_only(self) -> list[nn.Module]:
        """The modules upstream stores but never runs: later blocks, the final norm, the pool head."""
        unused = [*self.blocks[self.feature_block + 1 :], self.norm]
        return unused + ([self.attn_pool] if self.dims.attention_pool else [])

    def _with_positions(self, patches: torch.Tensor) -> torch.Tensor:
        batch = patches.shape[0]
        prefix = []
        if self.dims.class_token:
            prefix.append(self.cls_token.expand(batch, -1, -1))
        if self.dims.reg_tokens:
            prefix.append(self.reg_token.expand(batch, -1, -1))
        if self.dims.no_embed_class:  # positions on the patches, then the prefix tokens in front
            return torch.cat([*prefix, patches + self.pos_embed], dim=1)
        return torch.cat([*prefix, patches], dim=1) + self.pos_embed

    def forward(self, images: torch.Tensor, language: torch.Tensor | None = None) -> torch.Tensor:
        x = self._with_positions(self.patch_embed(images))
        for block in self.blocks[: self.feature_block + 1]:
            x = block(x, language)
        return x[:, self.dims.num_prefix_tokens :]


class PrismaticVisionBackbone(nn.Module):
    """One ViT, or two fused (DINOv2 on channels 0-2, SigLIP on 3-5, features concatenated)."""

    def __init__(self, featurizer: ViTDims, fused: ViTDims | None) -> None:
        super().__init__()
        self.featurizer = VisionTransformer(featurizer)
        self.fused_featurizer = None if fused is None else VisionTransformer(fused)
        self.embed_dim = featurizer.embed_dim + (0 if fused is None else fused.embed_dim)

    @property
    def vits(self) -> list[VisionTransformer]:
        return [self.featurizer] + ([] if self.fused_featurizer is None else [self.fused_featurizer])

    @property
    def has_film(self) -> bool:
        return self.featurizer.blocks[0].film is not None

    def add_film(self, llm_dim: int) -> None:
        """OFT's ``FiLMedPrismaticVisionBackbone``: a FiLM on every block of every ViT."""
        for vit in self.vits:
            for block in vit.blocks:
                block.film = FiLM(llm_dim, vit.dims.embed_dim)

    def stored_only(self) -> list[nn.Module]:
        return [module for vit in self.vits for module in vit.stored_only()]

    def forward(self, pixel_values: torch.Tensor, language: torch.Tensor | None = None) -> torch.Tensor:
        """Patch features; ``language`` [B, llm_dim] (the average prompt embedding) drives FiLM."""
        if self.has_film and language is None:
            raise ValueError("a FiLM vision backbone needs the average language embedding")
        if self.fused_featurizer is None:
            return self.featurizer(pixel_values, language)
        image, image_fused = torch.split(pixel_values, [3, 3], dim=1)
        return torch.cat(
            [self.featurizer(image, language), self.fused_featurizer(image_fused, language)], dim=2
        )
