"""A π checkpoint ready to act: the model, what its folder says, and its tokenizer, with
upstream's path from (camera images, state, task) to an un-normalised action chunk."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from policies.vla.pi.checkpoint import CheckpointError, PiCheckpoint, load_weights, read_checkpoint
from policies.vla.pi.inputs import pad_to, pi0_prompt, pi05_prompt, siglip_pixels, tokenize
from policies.vla.pi.models import PrefixCache, build_flow_model, euler_sample


@dataclass(frozen=True)
class PiInputs:
    """One batch as the model takes it."""

    pixel_values: torch.Tensor  # [B, cameras, 3, S, S] in [-1, 1]
    camera_mask: torch.Tensor  # [B, cameras] bool
    tokens: torch.Tensor  # [B, L]
    token_mask: torch.Tensor  # [B, L] bool
    state: torch.Tensor  # [B, max_state_dim], normalised and padded


def load_tokenizer(checkpoint: PiCheckpoint, tokenizer_dir: str | Path | None) -> Any:
    from transformers import AutoTokenizer

    source = tokenizer_dir
    if source is None and checkpoint.tokenizer_name is not None:
        for base in (Path.cwd(), checkpoint.folder):
            if (base / checkpoint.tokenizer_name).is_dir():
                source = base / checkpoint.tokenizer_name
                break
    if source is None:
        named = (
            f"names {checkpoint.tokenizer_name!r}, not a local folder"
            if checkpoint.tokenizer_name
            else "has none"
        )
        raise CheckpointError(
            f"{checkpoint.folder}: no tokenizer (the {checkpoint.layout} checkpoint {named}); pass the PaliGemma "
            "tokenizer's folder with --tokenizer / policy.vla.tokenizer"
        )
    if not Path(source).is_dir():
        raise CheckpointError(f"tokenizer {source}: not a folder")
    return AutoTokenizer.from_pretrained(str(source), local_files_only=True)


@dataclass
class LoadedPi:
    model: torch.nn.Module
    checkpoint: PiCheckpoint
    tokenizer: Any

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def inputs(self, images: dict[str, torch.Tensor], state: torch.Tensor, tasks: list[str]) -> PiInputs:
        """uint8 images by camera slot name, the raw state [B, state_dim], one task per row."""
        ckpt, dims = self.checkpoint, self.checkpoint.dims
        unknown = sorted(set(images) - set(ckpt.cameras))
        if unknown:
            raise CheckpointError(
                f"camera {unknown[0]!r}: the checkpoint has no slot for it; its slots: {list(ckpt.cameras)}"
            )
        if state.shape[-1] > dims.max_state_dim:
            raise CheckpointError(
                f"a state of {state.shape[-1]} dims is wider than the checkpoint's max_state_dim={dims.max_state_dim}"
            )
        if state.shape[-1] != ckpt.state_dim:
            raise CheckpointError(
                f"a state of {state.shape[-1]} dims; the checkpoint's norm stats are for {ckpt.state_dim}"
            )
        if not images:
            raise CheckpointError(f"no camera image; the checkpoint's slots: {list(ckpt.cameras)}")
        batch, size = state.shape[0], dims.vision.image_size
        pixels, present = [], []
        # openpi keeps every slot in place, an absent camera black (-1) and masked; LeRobot puts
        # the present cameras first and pads after them with the same masked black images.
        slots = ckpt.cameras
        if ckpt.layout == "lerobot":
            slots = tuple(s for s in ckpt.cameras if s in images) + tuple(
                s for s in ckpt.cameras if s not in images
            )
        for slot in slots:
            if slot in images:
                pixels.append(siglip_pixels(images[slot].to(self.device), size))
                present.append(torch.ones(batch, dtype=torch.bool, device=self.device))
            else:
                pixels.append(torch.full((batch, 3, size, size), -1.0, device=self.device))
                present.append(torch.zeros(batch, dtype=torch.bool, device=self.device))
        normalized = ckpt.state_norm.normalize(state.float().to(self.device))
        if ckpt.family == "pi05":
            prompts = [
                pi05_prompt(task, row) for task, row in zip(tasks, normalized.cpu().numpy(), strict=True)
            ]
        else:
            prompts = [pi0_prompt(task, ckpt.layout) for task in tasks]
        tokens, token_mask = tokenize(self.tokenizer, prompts, ckpt.token_length)
        dtype = next(self.model.parameters()).dtype
        return PiInputs(
            torch.stack(pixels, dim=1).to(dtype),
            torch.stack(present, dim=1),
            tokens.to(self.device),
            token_mask.to(self.device),
            pad_to(normalized, dims.max_state_dim),
        )

    def prefix(self, batch: PiInputs) -> PrefixCache:
        return self.model.encode_prefix(batch.pixel_values, batch.camera_mask, batch.tokens, batch.token_mask)

    @torch.no_grad()
    def sample(
        self, batch: PiInputs, noise: torch.Tensor, steps: int | None = None
    ) -> dict[str, torch.Tensor]:
        """Upstream's Euler sampler from ``noise`` [B, chunk, max_action_dim]: the padded normalised
        chunk, the un-normalised chunk in the env's action dims, and the velocity at t = 1."""
        dims = self.checkpoint.dims
        prefix = self.prefix(batch)
        state = batch.state if self.checkpoint.family == "pi0" else None
        chunk, v_t1 = euler_sample(
            self.model, prefix, state, noise.to(self.device), steps or dims.num_inference_steps
        )
        actions = self.checkpoint.action_norm.unnormalize(chunk[..., : self.checkpoint.action_dim].float())
        return {"actions_padded_normalized": chunk.float(), "action_chunk": actions, "v_t1": v_t1.float()}


def load_pi(
    folder: str | Path,
    dims_file: str | Path | None = None,
    tokenizer_dir: str | Path | None = None,
    asset_id: str | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> LoadedPi:
    checkpoint = read_checkpoint(folder, dims_file, asset_id)
    tokenizer = load_tokenizer(checkpoint, tokenizer_dir)
    model = build_flow_model(checkpoint.dims)
    load_weights(model, checkpoint, dtype, device)
    model.eval()
    return LoadedPi(model, checkpoint, tokenizer)
