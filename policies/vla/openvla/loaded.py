"""An OpenVLA checkpoint ready to act: upstream's ``predict_action`` path, batched."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policies.vla.openvla.checkpoint import OpenVLACheckpoint, load_weights, read_checkpoint
from policies.vla.openvla.inputs import pixels, tokenize, tokens_to_normalized, unnormalize
from policies.vla.openvla.model import OpenVLA, build_model, generate
from policies.vla.openvla.oft import (
    FiLMLayout,
    OFTHeads,
    film_file,
    has_oft_heads,
    load_heads,
    normalize_proprio,
    parallel_pass,
    read_film_backbone,
    unnormalize_oft,
)
from policies.vla.weights import CheckpointError

OFT_CHUNK = 8  # NUM_ACTIONS_CHUNK of OFT's LIBERO constants (not stored in the checkpoint)


@dataclass(frozen=True)
class OpenVLAInputs:
    pixel_values: torch.Tensor  # [B, images * (3 or 6), S, S]
    tokens: torch.Tensor  # [B, L], left-padded, ending in 29871
    token_mask: torch.Tensor  # [B, L]
    proprio: torch.Tensor | None = None  # [B, proprio_dim], normalised (OFT with a proprio projector)


def load_tokenizer(folder: Path, tokenizer_dir: str | Path | None = None) -> Any:
    from transformers import LlamaTokenizer

    source = Path(tokenizer_dir) if tokenizer_dir else folder
    if not (source / "tokenizer_config.json").is_file():
        raise CheckpointError(
            f"{source}: no tokenizer_config.json (OpenVLA folders carry their Llama-2 tokenizer; "
            "pass one with --tokenizer / policy.vla.tokenizer)"
        )
    config = json.loads((source / "tokenizer_config.json").read_text())
    if config.get("tokenizer_class", "LlamaTokenizer").startswith("Llama"):
        return LlamaTokenizer.from_pretrained(str(source), local_files_only=True)
    from transformers import PreTrainedTokenizerFast  # a tiny export's own tokenizer

    return PreTrainedTokenizerFast.from_pretrained(str(source), local_files_only=True)


@dataclass
class LoadedOpenVLA:
    model: OpenVLA
    checkpoint: OpenVLACheckpoint
    tokenizer: Any
    heads: OFTHeads | None = None  # OpenVLA-OFT's L1 head and proprio projector
    film: FiLMLayout | None = None  # OpenVLA-OFT with FiLM: how its vision backbone file is stored

    @property
    def device(self) -> torch.device:
        return self.model.projector.fc1.weight.device

    def inputs(
        self,
        images: torch.Tensor | list[torch.Tensor],
        instructions: list[str],
        state: np.ndarray | None = None,
        unnorm_key: str | None = None,
    ) -> OpenVLAInputs:
        """uint8 images [B, H, W, 3] (OFT: a list, the primary camera first), one instruction per row,
        and (OFT with proprio) the raw state [B, proprio_dim]."""
        c = self.checkpoint
        cameras = images if isinstance(images, list) else [images]
        pixel_values = torch.cat(
            [pixels(i, c.image_sizes, c.resize_strategy, c.pixel_means, c.pixel_stds) for i in cameras], dim=1
        )
        if self.heads is not None:  # OFT's get_vla_action lower-cases the task
            instructions = [text.lower() for text in instructions]
        tokens, mask = tokenize(self.tokenizer, instructions)
        proprio = None
        if self.heads is not None and self.heads.proprio_projector is not None:
            if state is None:
                raise ValueError("this OFT checkpoint has a proprio projector: give the state too")
            stats = self.norm_stats()[self.unnorm_key(unnorm_key)]["proprio"]
            proprio = torch.as_tensor(
                normalize_proprio(np.asarray(state, np.float64), stats), dtype=torch.float32
            )
            proprio = proprio.to(self.device)
        return OpenVLAInputs(
            pixel_values.to(self.device), tokens.to(self.device), mask.to(self.device), proprio
        )

    def norm_stats(self) -> dict:
        """``dataset_statistics.json`` where an OFT folder has it (OFT loads it over config.json's), else config.json's."""
        if self.heads is not None and self.heads.norm_stats is not None:
            return self.heads.norm_stats
        return self.checkpoint.norm_stats

    def unnorm_key(self, unnorm_key: str | None) -> str:
        keys = sorted(self.norm_stats())
        if not unnorm_key and len(keys) == 1:
            return keys[0]
        if unnorm_key not in keys:
            raise CheckpointError(
                f"{self.checkpoint.folder}: no norm_stats for unnorm_key {unnorm_key!r}; keys: {keys}"
            )
        return unnorm_key

    def action_stats(self, unnorm_key: str | None) -> Any:
        from dataclasses import replace

        return replace(self.checkpoint, norm_stats=self.norm_stats()).action_stats(unnorm_key)

    def prompt(self, batch: OpenVLAInputs) -> Any:
        extra = None
        if batch.proprio is not None:
            extra = self.heads.proprio_projector(batch.proprio.to(self.model.projector.fc1.weight.dtype))[
                :, None
            ]
        return self.model.prompt(batch.pixel_values, batch.tokens, batch.token_mask, extra)

    @torch.no_grad()
    def predict(
        self, batch: OpenVLAInputs, unnorm_key: str | None = None, chunk: int = OFT_CHUNK
    ) -> dict[str, np.ndarray]:
        """OpenVLA: greedy action tokens over the whole vocabulary (upstream's ``do_sample=False``) and
        their actions. OFT: the L1 head's chunk [B, chunk, A] from one parallel pass."""
        stats = self.action_stats(unnorm_key)
        prompt = self.prompt(batch)
        if self.heads is not None:
            if self.heads.action_dim != stats.dim:
                raise CheckpointError(
                    f"{self.checkpoint.folder}: the action head gives {self.heads.action_dim} dims, "
                    f"the statistics have {stats.dim}"
                )
            _, hidden, _ = parallel_pass(self.model, prompt, chunk * stats.dim)
            head = self.heads.action_head
            normalized = head(hidden.to(head.model.fc1.weight.dtype)).double().cpu().numpy()
            return {"normalized_actions": normalized, "actions": unnormalize_oft(normalized, stats)}
        tokens, _, _ = generate(self.model, prompt, stats.dim, lambda logits: logits.argmax(dim=-1))
        normalized = tokens_to_normalized(tokens, self.checkpoint.vocab_size, self.checkpoint.n_action_bins)
        return {"action_token_ids": tokens.cpu().numpy(), "actions": unnormalize(normalized, stats)}


def load_openvla(
    folder: str | Path,
    dims_file: str | Path | None = None,
    tokenizer_dir: str | Path | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> LoadedOpenVLA:
    """An OpenVLA folder; with ``action_head--*_checkpoint.pt`` beside it, OpenVLA-OFT."""
    checkpoint = read_checkpoint(folder, dims_file)
    heads = None
    if has_oft_heads(checkpoint.folder):
        from transformers import LlamaConfig

        llm_dim = LlamaConfig(**checkpoint.text_config).hidden_size
        heads = load_heads(checkpoint.folder, llm_dim, dtype)
        heads.action_head.to(device)
        if heads.proprio_projector is not None:
            heads.proprio_projector.to(device)
    model, film_tensors, film = build_and_read_film(checkpoint)
    load_weights(model, checkpoint.folder, dtype, device, film_tensors)
    tokenizer = load_tokenizer(checkpoint.folder, tokenizer_dir)
    return LoadedOpenVLA(model.eval(), checkpoint, tokenizer, heads, film)


def build_and_read_film(
    checkpoint: OpenVLACheckpoint,
) -> tuple[OpenVLA, dict[str, torch.Tensor] | None, FiLMLayout | None]:
    """The model on meta, with FiLM where the folder has OFT's ``vision_backbone--*_checkpoint.pt``,
    and that file's tensors (which stand in for ``model.safetensors``' vision backbone, as in OFT)."""
    path = film_file(checkpoint.folder) if checkpoint.folder.is_dir() else None
    model = build_model(checkpoint, film=path is not None)
    if path is None:
        return model, None, None
    tensors, layout = read_film_backbone(path, model)
    return model, tensors, layout
