"""``OpenVLAForActionPrediction``'s architecture on transformers' Llama: the fused ViTs, the MLP
projector, and the image patches spliced in right after BOS.

Upstream generates for one prompt at a time. Here prompts are left-padded so a batch generates
together: each row keeps upstream's order ``[BOS, patches, rest of the prompt]`` after its padding,
and positions count real tokens only, so every row sees what upstream's batch of one sees.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional

from policies.vla.openvla.checkpoint import OpenVLACheckpoint
from policies.vla.openvla.vision import PrismaticVisionBackbone
from policies.vla.weights import empty_parameters

STOP_TOKEN = 2  # "</s>": OFT's parallel pass ends in it, and FiLM's language average includes it


class PrismaticProjector(nn.Module):
    """fc1 -> GELU -> fc2 (-> GELU -> fc3 when fused: ``fused-gelu-mlp``)."""

    def __init__(self, fused: bool, vision_dim: int, llm_dim: int) -> None:
        super().__init__()
        self.fused = fused
        hidden = 4 * vision_dim if fused else llm_dim
        self.fc1 = nn.Linear(vision_dim, hidden)
        self.fc2 = nn.Linear(hidden, llm_dim)
        if fused:
            self.fc3 = nn.Linear(llm_dim, llm_dim)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        x = self.fc2(functional.gelu(self.fc1(patches)))
        return self.fc3(functional.gelu(x)) if self.fused else x


@dataclass
class Prompt:
    """A batch of prompts with their images spliced in: what the Llama runs over."""

    embeds: torch.Tensor  # [B, L + patches, D]
    mask: torch.Tensor  # [B, L + patches] (long, 0 on the left padding)
    positions: torch.Tensor  # [B, L + patches]


class OpenVLA(nn.Module):
    """Vision backbone, projector and ``language_model`` (a ``LlamaForCausalLM``), under upstream's names."""

    def __init__(self, checkpoint: OpenVLACheckpoint) -> None:
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        self.vision_backbone = PrismaticVisionBackbone(checkpoint.featurizer, checkpoint.fused_featurizer)
        llm_config = LlamaConfig(**checkpoint.text_config)
        self.projector = PrismaticProjector(
            checkpoint.fused_featurizer is not None, self.vision_backbone.embed_dim, llm_config.hidden_size
        )
        self.language_model = LlamaForCausalLM(llm_config)

    def stored_only(self) -> list[nn.Module]:
        return self.vision_backbone.stored_only()

    def image_patches(self, pixel_values: torch.Tensor, language: torch.Tensor | None = None) -> torch.Tensor:
        """Projected patches [B, images * patches, D] of [B, images * (3 or 6), S, S] (OFT stacks its
        images on the channels; upstream's OpenVLA takes one); ``language`` [B, D] drives OFT's FiLM."""
        dtype = self.projector.fc1.weight.dtype
        pixel_values = pixel_values.to(dtype)
        language = None if language is None else language.to(dtype)
        per_image = 6 if self.vision_backbone.fused_featurizer is not None else 3
        images = torch.split(pixel_values, per_image, dim=1)
        return torch.cat([self.projector(self.vision_backbone(i, language)) for i in images], dim=1)

    def average_language(self, text: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """FiLM's input: the mean embedding of the prompt's tokens (BOS to 29871, padding left out)
        and the STOP token, the positions OFT's ``predict_action`` keeps outside its action mask."""
        stop = self.language_model.get_input_embeddings()(torch.full_like(mask[:, :1], STOP_TOKEN))
        weights = mask.to(text.dtype)[..., None]
        return ((text * weights).sum(dim=1) + stop[:, 0]) / (weights.sum(dim=1) + 1)

    def prompt(
        self,
        pixel_values: torch.Tensor,
        tokens: torch.Tensor,
        token_mask: torch.Tensor,
        extra: torch.Tensor | None = None,
    ) -> Prompt:
        """Embed left-padded ``tokens`` [B, L] with each row's image patches right after its BOS
        (then ``extra`` [B, K, D], OFT's proprio token, after the patches)."""
        text = self.language_model.get_input_embeddings()(tokens)
        mask = token_mask.long()
        language = self.average_language(text, mask) if self.vision_backbone.has_film else None
        patches = self.image_patches(pixel_values, language)
        if extra is not None:
            patches = torch.cat([patches, extra.to(patches.dtype)], dim=1)
        bos = (mask == 0).sum(dim=1)  # left padding: each row's BOS sits after its pads
        ones = torch.ones(patches.shape[:2], dtype=mask.dtype, device=mask.device)
        rows, masks = [], []
        for row, at in enumerate(bos.tolist()):
            rows.append(torch.cat([text[row, : at + 1], patches[row], text[row, at + 1 :]]))
            masks.append(torch.cat([mask[row, : at + 1], ones[row], mask[row, at + 1 :]]))
        full_mask = torch.stack(masks)
        positions = (full_mask.cumsum(dim=1) - 1).clamp(min=0)
        return Prompt(torch.stack(rows), full_mask, positions)

    def run(
        self,
        embeds: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        cache: object | None = None,
        hidden: bool = False,
        keep: int = 1,
        bidirectional: bool = False,
    ) -> tuple[torch.Tensor, object, torch.Tensor | None]:
        """The logits of the last ``keep`` positions (and the last layer's hidden states) of the Llama
        over ``embeds``; ``cache`` (a ``DynamicCache``), where given, is extended in place.
        ``bidirectional``: every position attends to every real one (OFT's parallel decoding)."""
        if bidirectional:  # a 4D boolean mask is taken as given: keys that are not padding
            mask = mask.bool()[:, None, None, :].expand(-1, 1, mask.shape[1], -1)
        out = self.language_model(
            inputs_embeds=embeds,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=cache is not None,
            output_hidden_states=hidden,
            logits_to_keep=keep,
        )
        return out.logits, cache, out.hidden_states[-1] if hidden else None


def build_model(checkpoint: OpenVLACheckpoint, film: bool = False) -> OpenVLA:
    """The model with its parameters on the meta device (fill with ``load_weights``); ``film``: OFT's
    FiLM on every vision block."""
    with empty_parameters():
        model = OpenVLA(checkpoint)
        if film:
            model.vision_backbone.add_film(model.language_model.config.hidden_size)
        return model


def generate(
    model: OpenVLA,
    prompt: Prompt,
    steps: int,
    choose: object,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Decode ``steps`` tokens with a KV cache; ``choose(logits [B, V]) -> tokens [B]``.

    Returns the tokens [B, steps], the logits they were chosen from [B, steps, V] and the last
    prompt position's hidden state [B, D] (for a value head)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    logits, cache, hidden = model.run(prompt.embeds, prompt.mask, prompt.positions, cache, hidden=True)
    prompt_state = hidden[:, -1]
    step_logits = logits[:, -1]
    mask, position = prompt.mask, prompt.positions[:, -1:]
    embed = model.language_model.get_input_embeddings()
    tokens, all_logits = [], []
    for step in range(steps):
        token = choose(step_logits)
        tokens.append(token)
        all_logits.append(step_logits)
        if step == steps - 1:
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        position = position + 1
        logits, cache, _ = model.run(embed(token[:, None]), mask, position, cache)
        step_logits = logits[:, -1]
    return torch.stack(tokens, dim=1), torch.stack(all_logits, dim=1), prompt_state
