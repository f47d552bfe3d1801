"""SmolVLA as LeRobot defines it (``SmolVLAPolicy``, ``SmolVLMWithExpertModel``), on transformers'
SmolVLM and Llama modules, under LeRobot's parameter names (without its ``model.`` prefix).

- The VLM is a ``SmolVLMForConditionalGeneration`` cut to its first ``num_vlm_layers`` text layers;
  images go through its vision model and pixel-shuffle connector, scaled by sqrt(width), the
  prompt's embeddings too; the state is one projected token after them, behind a causal barrier.
- The expert is a Llama at ``expert_width_multiplier`` of the VLM's width with as many layers.
  Every ``self_attn_every_n_layers``-th layer attends jointly (its queries over the cached prefix
  keys and its own); the others cross-attend: the cached prefix keys / values of that layer
  (after RoPE) pass through the expert's own ``k_proj`` / ``v_proj``, whose inputs are the VLM's
  key / value width.
- Both run LeRobot's own layer loop: its RoPE (wavelength 10 000 whatever the config says), its
  eager attention (float32 softmax, masked with the dtype's minimum), and expert positions that
  restart at 0 in cross-attention layers.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from policies.vla.pi.models import sinusoidal_time
from policies.vla.weights import empty_parameters


def expert_intermediate_size(width: int, multiplier: int = 4, multiple_of: int = 256) -> int:
    """LeRobot's ``get_intermediate_size``."""
    hidden = int(multiplier * int(2 * width / 3))
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, max_wavelength: float = 10_000) -> torch.Tensor:
    """RoPE of positions [B, L] on x [B, L, H, D] (halves rotated, in float32)."""
    half = x.shape[-1] // 2
    dtype = x.dtype
    x = x.float()
    exponents = (2.0 / x.shape[-1]) * torch.arange(half, dtype=torch.float32, device=x.device)
    radians = positions[..., None].float() / (max_wavelength**exponents)[None, None, :]
    sin, cos = radians[..., None, :].sin(), radians[..., None, :].cos()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(dtype)


def attention_2d(pad_masks: torch.Tensor, ar_masks: torch.Tensor) -> torch.Tensor:
    """big_vision's block-causal mask [B, N, N] from padding and autoregressive marks [B, N]."""
    cumsum = torch.cumsum(ar_masks.long(), dim=1)
    return (cumsum[:, None, :] <= cumsum[:, :, None]) & (pad_masks[:, None, :] & pad_masks[:, :, None])


@dataclass(frozen=True)
class SmolVLADims:
    vlm_config: dict[str, Any]  # the SmolVLM folder's config.json
    num_vlm_layers: int = 16
    expert_width_multiplier: float = 0.75
    self_attn_every_n_layers: int = 2
    chunk_size: int = 50
    max_state_dim: int = 32
    max_action_dim: int = 32
    num_steps: int = 10
    min_period: float = 4e-3
    max_period: float = 4.0


class VLMWithExpert(nn.Module):
    """``vlm`` (SmolVLM, cut) and ``lm_expert`` (a Llama without embeddings), LeRobot's names."""

    def __init__(self, dims: SmolVLADims) -> None:
        super().__init__()
        from transformers import AutoConfig, LlamaModel, SmolVLMForConditionalGeneration

        config = AutoConfig.for_model(**copy.deepcopy(dims.vlm_config))
        self.vlm = SmolVLMForConditionalGeneration(config)
        text = self.vlm.model.text_model
        if dims.num_vlm_layers > 0:
            text.layers = text.layers[: dims.num_vlm_layers]
        self.num_layers = len(text.layers)
        text_config = config.text_config
        expert_config = copy.deepcopy(text_config)
        width = int(text_config.hidden_size * dims.expert_width_multiplier)
        expert_config.hidden_size = width
        expert_config.intermediate_size = expert_intermediate_size(width)
        expert_config.num_hidden_layers = self.num_layers
        self.lm_expert = LlamaModel(expert_config)
        self.every = dims.self_attn_every_n_layers
        kv_width = text_config.num_key_value_heads * text_config.head_dim
        for index, layer in enumerate(self.lm_expert.layers):
            if not self.is_self_attention(index):
                layer.self_attn.k_proj = nn.Linear(kv_width, kv_width, bias=expert_config.attention_bias)
                layer.self_attn.v_proj = nn.Linear(kv_width, kv_width, bias=expert_config.attention_bias)
        self.lm_expert.embed_tokens = None
        self.num_heads, self.num_kv_heads = text_config.num_attention_heads, text_config.num_key_value_heads
        self.head_dim = text_config.head_dim
        self.expert_width = width

    @property
    def text_model(self) -> nn.Module:
        return self.vlm.model.text_model

    def is_self_attention(self, index: int) -> bool:
        return self.every > 0 and index % self.every == 0

    def attend(self, mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """LeRobot's eager attention: q [B, Lq, H, D], k / v [B, Lk, KV, D], mask [B, Lq, Lk] bool."""
        groups = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(groups, dim=2) if groups > 1 else k
        v = v.repeat_interleave(groups, dim=2) if groups > 1 else v
        weights = torch.matmul(q.float().transpose(1, 2), k.float().transpose(1, 2).transpose(2, 3))
        weights = weights * self.head_dim**-0.5
        weights = torch.where(mask[:, None], weights, torch.finfo(weights.dtype).min)
        probs = functional.softmax(weights, dim=-1).to(v.dtype)
        out = torch.matmul(probs, v.transpose(1, 2)).transpose(1, 2)
        return out.reshape(out.shape[0], out.shape[1], -1)

    @staticmethod
    def _qkv(layer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = layer.input_layernorm(x)
        shape = (*h.shape[:-1], -1, layer.self_attn.head_dim)
        attn = layer.self_attn
        return attn.q_proj(h).view(shape), attn.k_proj(h).view(shape), attn.v_proj(h).view(shape)

    @staticmethod
    def _finish(layer: nn.Module, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        x = x + layer.self_attn.o_proj(attended.to(layer.self_attn.o_proj.weight.dtype))
        return x + layer.mlp(layer.post_attention_layernorm(x))

    def prefix(
        self, embeds: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor
    ) -> tuple[list, torch.Tensor]:
        """The VLM over the prefix: each layer's (keys after RoPE, values) [B, P, KV, D], and the
        last hidden states after the final norm (what a value head reads)."""
        cache = []
        x = embeds
        for layer in self.text_model.layers:
            q, k, v = self._qkv(layer, x)
            q, k = apply_rope(q, positions), apply_rope(k, positions)
            cache.append((k, v))
            x = self._finish(layer, x, self.attend(mask, q, k, v))
        return cache, self.text_model.norm(x)

    def suffix(
        self, cache: list, x: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, prefix_len: int
    ) -> torch.Tensor:
        """The expert over the suffix x [B, S, W] against the cached prefix; mask [B, S, P + S]."""
        for index, layer in enumerate(self.lm_expert.layers):
            prefix_k, prefix_v = cache[index]
            if self.is_self_attention(index):
                q, k, v = self._qkv(layer, x)
                q, k = apply_rope(q, positions), apply_rope(k, positions)
                k, v = (
                    torch.cat([prefix_k, k.to(prefix_k.dtype)], 1),
                    torch.cat([prefix_v, v.to(prefix_v.dtype)], 1),
                )
                attended = self.attend(mask, q, k, v)
            else:
                attn = layer.self_attn
                h = layer.input_layernorm(x)
                q = attn.q_proj(h).view(*h.shape[:-1], -1, attn.head_dim)
                k = attn.k_proj(prefix_k.flatten(2).to(attn.k_proj.weight.dtype)).view(
                    *prefix_k.shape[:2], -1, attn.head_dim
                )
                v = attn.v_proj(prefix_v.flatten(2).to(attn.v_proj.weight.dtype)).view(
                    *prefix_v.shape[:2], -1, attn.head_dim
                )
                restarted = positions - positions.min(dim=1, keepdim=True).values
                attended = self.attend(mask[:, :, :prefix_len], apply_rope(q, restarted), k, v)
            x = self._finish(layer, x, attended)
        return self.lm_expert.norm(x)


@dataclass
class SmolVLAPrefix:
    cache: list
    mask: torch.Tensor  # [B, P] bool: real prefix positions
    hidden: torch.Tensor | None = None


class SmolVLAFlow(nn.Module):
    """SmolVLA's ``VLAFlowMatching``: encode the prefix once, then the velocity of a noisy chunk."""

    def __init__(self, dims: SmolVLADims) -> None:
        super().__init__()
        self.dims = dims
        self.vlm_with_expert = VLMWithExpert(dims)
        text_width = self.vlm_with_expert.vlm.config.text_config.hidden_size
        width = self.vlm_with_expert.expert_width
        self.state_proj = nn.Linear(dims.max_state_dim, text_width)
        self.action_in_proj = nn.Linear(dims.max_action_dim, width)
        self.action_out_proj = nn.Linear(width, dims.max_action_dim)
        self.action_time_mlp_in = nn.Linear(2 * width, width)
        self.action_time_mlp_out = nn.Linear(width, width)

    def embed_image(self, pixel_values: torch.Tensor) -> torch.Tensor:
        vlm = self.vlm_with_expert.vlm.model
        hidden = vlm.vision_model(pixel_values=pixel_values.to(vlm.vision_model.dtype)).last_hidden_state
        return vlm.connector(hidden)

    def encode_prefix(
        self, images: list[torch.Tensor], camera_masks: list[torch.Tensor], tokens: torch.Tensor,
        token_mask: torch.Tensor, state: torch.Tensor,
    ) -> SmolVLAPrefix:  # fmt: skip
        """images: per camera [B, 3, S, S] in [-1, 1]; state [B, max_state_dim], normalised and padded."""
        embeds, pads = [], []
        for image, present in zip(images, camera_masks, strict=True):
            emb = self.embed_image(image)
            emb = emb * torch.tensor(emb.shape[-1] ** 0.5, dtype=emb.dtype, device=emb.device)
            embeds.append(emb)
            pads.append(present[:, None].expand(emb.shape[0], emb.shape[1]))
        text = self.vlm_with_expert.text_model.get_input_embeddings()(tokens)
        embeds.append(text * math.sqrt(text.shape[-1]))
        pads.append(token_mask.bool())
        state_emb = self.state_proj(state.to(self.state_proj.weight.dtype))[:, None]
        embeds.append(state_emb.to(text.dtype))
        pads.append(torch.ones(state.shape[0], 1, dtype=torch.bool, device=state.device))
        embeds_t, pad = torch.cat(embeds, 1), torch.cat(pads, 1)
        ar = torch.zeros_like(pad)
        ar[:, -1] = True  # the state token: the prefix before it cannot see it
        positions = pad.long().cumsum(1) - 1
        cache, hidden = self.vlm_with_expert.prefix(embeds_t, attention_2d(pad, ar), positions)
        return SmolVLAPrefix(cache, pad, hidden)

    def velocity(self, prefix: SmolVLAPrefix, state: None, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """v(x_t, t) [B, chunk, max_action_dim] for a noisy chunk x [B, chunk, max_action_dim] at t [B]
        (``state`` is unused: SmolVLA's state is a prefix token; the π models' signature)."""
        width = self.vlm_with_expert.expert_width
        actions = self.action_in_proj(x.to(self.action_in_proj.weight.dtype))
        time = sinusoidal_time(t, width, self.dims.min_period, self.dims.max_period).to(actions.dtype)
        fused = torch.cat([actions, time[:, None].expand_as(actions)], dim=2)
        suffix = self.action_time_mlp_out(functional.silu(self.action_time_mlp_in(fused)))
        batch, length = suffix.shape[:2]
        prefix_len = prefix.mask.shape[1]
        suffix_pad = torch.ones(batch, length, dtype=torch.bool, device=x.device)
        suffix_mask = attention_2d(suffix_pad, torch.ones_like(suffix_pad))
        mask = torch.cat([prefix.mask[:, None].expand(batch, length, prefix_len), suffix_mask], dim=2)
        positions = prefix.mask.sum(-1, keepdim=True) + torch.cumsum(suffix_pad.long(), 1) - 1
        out = self.vlm_with_expert.suffix(prefix.cache, suffix, mask, positions, prefix_len)
        return self.action_out_proj(out[:, -self.dims.chunk_size :].to(self.action_out_proj.weight.dtype))


def build_smolvla(dims: SmolVLADims) -> SmolVLAFlow:
    with empty_parameters():
        return SmolVLAFlow(dims)


def euler_sample(
    model: SmolVLAFlow, prefix: SmolVLAPrefix, noise: torch.Tensor, steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """LeRobot's ``euler_integrate`` from t = 1: (the chunk, v at t = 1)."""
    dt, x, first = -1.0 / steps, noise, None
    for step in range(steps):
        t = torch.full((x.shape[0],), 1.0 + step * dt, dtype=torch.float32, device=x.device)
        v = model.velocity(prefix, None, x, t).float()
        first = v if first is None else first
        x = x + dt * v
    return x, first
