"""An OpenVLA checkpoint ready to act: upstream's ``predict_action`` path, batched."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policies.vla.openvla.checkpoint import OpenVLACheckpoint, load_weights, read_checkpoint
from policies.vla.openvla.inputs import pixels, tokenize, tokens_to_normalized, unnormalize
from policies.vla.openvla.model import OpenVLA, build_model, generate
from policies.vla.weights import CheckpointError


@dataclass(frozen=True)
class OpenVLAInputs:
    pixel_values: torch.Tensor  # [B, 3 or 6, S, S]
    tokens: torch.Tensor  # [B, L], left-padded, ending in 29871
    token_mask: torch.Tensor  # [B, L]


def load_tokenizer(folder: Path, tokenizer_dir: str | Path | None = None) -> Any:
    from transformers import LlamaTokenizer

    source = Path(tokenizer_dir) if tokenizer_dir else folder
    if not (source / "tokenizer_config.json").is_file():
        raise CheckpointError(
            f"{source}: no tokenizer_config.json (OpenVLA folders carry their Llama-2 tokenizer; "
            "pass one with --tokenizer / policy.vla.tokenizer)"
        )
    return LlamaTokenizer.from_pretrained(str(source), local_files_only=True)


@dataclass
class LoadedOpenVLA:
    model: OpenVLA
    checkpoint: OpenVLACheckpoint
    tokenizer: Any

    @property
    def device(self) -> torch.device:
        return self.model.projector.fc1.weight.device

    def inputs(self, images: torch.Tensor, instructions: list[str]) -> OpenVLAInputs:
        """uint8 images [B, H, W, 3] and one instruction per row."""
        c = self.checkpoint
        pixel_values = pixels(images, c.image_sizes, c.resize_strategy, c.pixel_means, c.pixel_stds)
        tokens, mask = tokenize(self.tokenizer, instructions)
        return OpenVLAInputs(pixel_values.to(self.device), tokens.to(self.device), mask.to(self.device))

    @torch.no_grad()
    def predict(self, batch: OpenVLAInputs, unnorm_key: str | None = None) -> dict[str, np.ndarray]:
        """Greedy action tokens over the whole vocabulary (upstream's ``do_sample=False``) and their actions."""
        stats = self.checkpoint.action_stats(unnorm_key)
        prompt = self.model.prompt(batch.pixel_values, batch.tokens, batch.token_mask)
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
    checkpoint = read_checkpoint(folder, dims_file)
    model = build_model(checkpoint)
    load_weights(model, checkpoint.folder, dtype, device)
    return LoadedOpenVLA(model.eval(), checkpoint, load_tokenizer(checkpoint.folder, tokenizer_dir))
