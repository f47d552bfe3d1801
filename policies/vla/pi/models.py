"""The π models behind one small interface: ``encode_prefix`` runs the PaliGemma over the images
and the prompt once (a KV cache), ``velocity`` runs the action expert over a noisy chunk at time t
against that cache. π0 is transformers' ``PI0ForConditionalGeneration`` (its expert is a plain
Gemma attending to the cached prefix, the state a suffix token); π0.5 has no state token and
conditions the expert's RMS norms on the time (:class:`AdaptiveGemmaExpert`).

Parameters are created on the meta device (:func:`empty_parameters`) and filled by
``load_state_dict(assign=True)``, so a checkpoint lands in its target dtype without a float32 copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from policies.vla.pi.dims import GemmaDims, PiDims
from policies.vla.weights import empty_parameters


def gemma_config(dims: GemmaDims, vocab_size: int) -> dict[str, Any]:
    return dict(
        model_type="gemma",
        hidden_size=dims.width,
        num_hidden_layers=dims.depth,
        intermediate_size=dims.mlp_dim,
        num_attention_heads=dims.num_heads,
        num_key_value_heads=dims.num_kv_heads,
        head_dim=dims.head_dim,
        vocab_size=vocab_size,
    )


# SigLIP's 256-token attention in eager mode: on this 2-core CPU 4.42 s vs sdpa's 4.97 s for two
# so400m images (benchmarks/vla_inference.py's config); the Gemmas keep transformers' default.
VISION_ATTENTION = "eager"


def paligemma_config(dims: PiDims) -> dict[str, Any]:
    vision = dims.vision
    return dict(
        model_type="paligemma",
        text_config=gemma_config(dims.vlm, dims.vocab_size),
        vision_config=dict(
            model_type="siglip_vision_model",
            hidden_size=vision.hidden_size,
            intermediate_size=vision.intermediate_size,
            num_hidden_layers=vision.num_hidden_layers,
            num_attention_heads=vision.num_attention_heads,
            patch_size=vision.patch_size,
            image_size=vision.image_size,
            vision_use_head=False,
        ),
        projection_dim=dims.projection_dim,
        image_token_id=dims.image_token_id,
    )


def sinusoidal_time(t: torch.Tensor, width: int, min_period: float, max_period: float) -> torch.Tensor:
    """openpi's time embedding of t [B] -> [B, width] (computed in float64, as upstream)."""
    dtype = torch.float64 if t.device.type != "mps" else torch.float32
    fraction = torch.linspace(0.0, 1.0, width // 2, dtype=dtype, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    angles = (2 * math.pi / period)[None, :] * t[:, None].to(dtype)
    return torch.cat([angles.sin(), angles.cos()], dim=1).to(t.dtype)


@dataclass
class PrefixCache:
    """The PaliGemma's keys and values over the prefix, and which prefix positions are real."""

    cache: Any
    mask: torch.Tensor  # [B, P] bool
    hidden: torch.Tensor | None = None  # [B, P, width]: the PaliGemma's last hidden states

    @property
    def length(self) -> int:
        return int(self.mask.shape[1])


def encode_prefix(
    vlm: nn.Module,
    pixel_values: torch.Tensor,
    camera_mask: torch.Tensor,
    tokens: torch.Tensor,
    token_mask: torch.Tensor,
) -> PrefixCache:
    """``[camera patches...] [prompt tokens]`` through the PaliGemma, bidirectional over the prefix.

    pixel_values [B, cameras, 3, H, W] in [-1, 1]; camera_mask [B, cameras] (an absent camera's
    patches are embedded but masked, as upstream); tokens / token_mask [B, L]."""
    batch, cameras = camera_mask.shape
    features = vlm.get_image_features(pixel_values.flatten(0, 1)).pooler_output
    per_image = features.shape[1]
    images = features.reshape(batch, cameras * per_image, -1)
    text = vlm.get_input_embeddings()(tokens)
    embeds = torch.cat([images.to(text.dtype), text], dim=1)
    mask = torch.cat([camera_mask.repeat_interleave(per_image, dim=1), token_mask.bool()], dim=1)
    out = vlm(
        inputs_embeds=embeds,
        attention_mask=mask.long(),
        position_ids=mask.long().cumsum(-1) - 1,
        token_type_ids=torch.zeros_like(mask, dtype=torch.long),
        use_cache=True,
    )
    return PrefixCache(
        out.cache if hasattr(out, "cache") else out.past_key_values, mask, out.last_hidden_state
    )


# -- π0: transformers' model --------------------------------------------------------------------
def build_pi0(dims: PiDims) -> nn.Module:
    from transformers import PI0Config, PI0ForConditionalGeneration

    config = PI0Config(
        vlm_config=paligemma_config(dims),
        dit_config={k: v for k, v in gemma_config(dims.expert, dims.vocab_size).items() if k != "vocab_size"},
        chunk_size=dims.chunk_size,
        max_state_dim=dims.max_state_dim,
        max_action_dim=dims.max_action_dim,
        num_inference_steps=dims.num_inference_steps,
        min_period=dims.min_period,
        max_period=dims.max_period,
    )
    with empty_parameters():
        model = PI0ForConditionalGeneration(config)
    model.model.vlm.vision_tower.config._attn_implementation = VISION_ATTENTION
    return model


class Pi0Flow(nn.Module):
    """π0 seen through ``encode_prefix`` / ``velocity``."""

    family = "pi0"

    def __init__(self, dims: PiDims) -> None:
        super().__init__()
        self.dims = dims
        self.pi0 = build_pi0(dims)

    @property
    def vlm(self) -> nn.Module:
        return self.pi0.model.vlm

    def encode_prefix(self, pixel_values, camera_mask, tokens, token_mask) -> PrefixCache:
        return encode_prefix(self.vlm, pixel_values, camera_mask, tokens, token_mask)

    def velocity(
        self, prefix: PrefixCache, state: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor
    ) -> torch.Tensor:
        """v(x_t, t) [B, chunk, max_action_dim] for the padded, normalised ``state`` [B, max_state_dim]."""
        out = self.pi0(
            state=state.to(x_t.dtype),
            noise=x_t,
            timestep=t,
            attention_mask=prefix.mask.long(),
            cache=prefix.cache,
        )
        prefix.cache.crop(prefix.length - prefix.cache.get_seq_length())
        return out.logits

    def state_dict_names(self) -> dict[str, str]:
        """Our parameter names -> openpi's (the ``model.``-less LeRobot names)."""
        names = {}
        for ours in self.state_dict():
            theirs = ours.removeprefix("pi0.")
            theirs = theirs.replace("embed_action_time.", "")
            theirs = theirs.replace(
                "model.vlm.vision_tower.", "paligemma_with_expert.paligemma.model.vision_tower.vision_model."
            )
            theirs = theirs.replace("model.vlm.", "paligemma_with_expert.paligemma.model.")
            theirs = theirs.replace(
                "model.dit.embed_tokens.weight", "paligemma_with_expert.gemma_expert.lm_head.weight"
            )
            theirs = theirs.replace("model.dit.", "paligemma_with_expert.gemma_expert.model.")
            names[ours] = theirs
        return names


# -- π0.5: an expert with adaptive RMS norms ------------------------------------------------------
class AdaptiveRMSNorm(nn.Module):
    """Gemma's RMS norm whose scale, shift and residual gate come from a condition (π0.5's time)."""

    def __init__(self, width: int, cond_width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.dense = nn.Linear(cond_width, 3 * width)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        normed = x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + self.eps)
        scale, shift, gate = self.dense(cond)[:, None].chunk(3, dim=-1)
        return (normed * (1 + scale.float()) + shift.float()).to(x.dtype), gate.to(x.dtype)


class AdaptiveGemmaLayer(nn.Module):
    def __init__(self, config: Any, layer_idx: int) -> None:
        super().__init__()
        from transformers.models.gemma.modeling_gemma import GemmaAttention, GemmaMLP

        self.self_attn = GemmaAttention(config, layer_idx)
        self.mlp = GemmaMLP(config)
        width, eps = config.hidden_size, config.rms_norm_eps
        self.input_layernorm = AdaptiveRMSNorm(width, width, eps)
        self.post_attention_layernorm = AdaptiveRMSNorm(width, width, eps)

    def forward(self, x, cond, mask, position_embeddings, cache) -> torch.Tensor:
        h, gate = self.input_layernorm(x, cond)
        h, _ = self.self_attn(h, position_embeddings=position_embeddings, attention_mask=mask, cache=cache)
        x = x + h * gate
        h, gate = self.post_attention_layernorm(x, cond)
        return x + self.mlp(h) * gate


class AdaptiveGemmaExpert(nn.Module):
    """π0.5's action expert: Gemma layers whose norms read the time condition, attending to the
    prefix's cached keys and values (each layer to the PaliGemma layer of the same index)."""

    def __init__(self, dims: GemmaDims, vocab_size: int) -> None:
        super().__init__()
        from transformers import GemmaConfig
        from transformers.models.gemma.modeling_gemma import GemmaRotaryEmbedding

        fields = {k: v for k, v in gemma_config(dims, vocab_size).items() if k != "model_type"}
        self.config = GemmaConfig(**fields)
        self.config._attn_implementation = "sdpa"
        self.layers = nn.ModuleList(AdaptiveGemmaLayer(self.config, i) for i in range(dims.depth))
        self.norm = AdaptiveRMSNorm(dims.width, dims.width, self.config.rms_norm_eps)
        self.rotary_emb = GemmaRotaryEmbedding(self.config)

    def forward(self, x, cond, mask, position_ids, cache) -> torch.Tensor:
        position_embeddings = self.rotary_emb(x, position_ids)
        for layer in self.layers:
            x = layer(x, cond, mask, position_embeddings, cache)
        return self.norm(x, cond)[0]


class Pi05Flow(nn.Module):
    """π0.5: PaliGemma prefix (the state is in the prompt), adaptive-norm expert over the actions."""

    family = "pi05"

    def __init__(self, dims: PiDims) -> None:
        super().__init__()
        from transformers import AutoConfig, AutoModel

        self.dims = dims
        config = paligemma_config(dims)
        config = AutoConfig.for_model(**config)
        config.text_config.use_bidirectional_attention = True
        width = dims.expert.width
        with empty_parameters():
            self.vlm = AutoModel.from_config(config)
        self.vlm.vision_tower.config._attn_implementation = VISION_ATTENTION
        with empty_parameters():
            self.expert = AdaptiveGemmaExpert(dims.expert, dims.vocab_size)
            self.action_in_proj = nn.Linear(dims.max_action_dim, width)
            self.time_mlp_in = nn.Linear(width, width)
            self.time_mlp_out = nn.Linear(width, width)
            self.action_out_proj = nn.Linear(width, dims.max_action_dim)

    def encode_prefix(self, pixel_values, camera_mask, tokens, token_mask) -> PrefixCache:
        return encode_prefix(self.vlm, pixel_values, camera_mask, tokens, token_mask)

    def velocity(
        self, prefix: PrefixCache, state: torch.Tensor | None, x_t: torch.Tensor, t: torch.Tensor
    ) -> torch.Tensor:
        dims = self.dims
        suffix = self.action_in_proj(x_t)
        time = sinusoidal_time(t, dims.expert.width, dims.min_period, dims.max_period).to(suffix.dtype)
        cond = functional.silu(self.time_mlp_out(functional.silu(self.time_mlp_in(time))))
        batch, chunk = x_t.shape[:2]
        keep = torch.cat([prefix.mask, prefix.mask.new_ones(batch, chunk)], dim=1)  # actions see all
        mask = torch.zeros(keep.shape, dtype=suffix.dtype, device=suffix.device)
        mask = mask.masked_fill(~keep, torch.finfo(suffix.dtype).min)[:, None, None, :].expand(
            -1, 1, chunk, -1
        )
        positions = prefix.mask.sum(-1, keepdim=True) + torch.arange(chunk, device=x_t.device)
        hidden = self.expert(suffix, cond, mask, positions, prefix.cache)
        prefix.cache.crop(prefix.length - prefix.cache.get_seq_length())
        return self.action_out_proj(hidden.float().to(self.action_out_proj.weight.dtype))

    def state_dict_names(self) -> dict[str, str]:
        names = {}
        for ours in self.state_dict():
            theirs = ours.replace(
                "vlm.vision_tower.", "paligemma_with_expert.paligemma.model.vision_tower.vision_model."
            )
            if theirs.startswith("vlm."):
                theirs = "paligemma_with_expert.paligemma.model." + theirs.removeprefix("vlm.")
            if theirs.startswith("expert."):
                theirs = "paligemma_with_expert.gemma_expert.model." + theirs.removeprefix("expert.")
            names[ours] = theirs
        return names


FLOW_MODELS = {"pi0": Pi0Flow, "pi05": Pi05Flow}


def build_flow_model(dims: PiDims) -> nn.Module:
    return FLOW_MODELS[dims.family](dims)


def euler_sample(
    model: nn.Module, prefix: PrefixCache, state: torch.Tensor | None, noise: torch.Tensor, steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream's sampler: ``steps`` Euler steps of dt = -1/steps from t = 1. Returns the chunk and
    the first velocity (at t = 1)."""
    dt = -1.0 / steps
    x, first = noise, None
    for step in range(steps):
        t = torch.full((noise.shape[0],), 1.0 + step * dt, dtype=torch.float32, device=noise.device)
        v = model.velocity(prefix, state, x, t)
        first = v if first is None else first
        x = x + dt * v
    return x, first
