"""A LeRobot SmolVLA folder (``config.json`` with ``"type": "smolvla"``) ready to act, nothing downloaded.

The folder names its VLM (``vlm_model_name``: a hub id or a local folder with the SmolVLM config,
tokenizer and processor) and its normalisers (the pre / post-processor JSON, as π0's). The VLM
folder is looked for as given, then beside the checkpoint, then in its parent; ``vlm_dir`` (CLI
``--vlm``, ``policy.vla.tokenizer``) names it outright. Weights are the checkpoint's own (SmolVLA
is saved whole), read into the target dtype one tensor at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional

from policies.vla.pi.checkpoint import _lerobot_norm, _processor_step
from policies.vla.pi.inputs import Normalization, pad_to
from policies.vla.smolvla.model import SmolVLADims, SmolVLAFlow, SmolVLAPrefix, build_smolvla, euler_sample
from policies.vla.weights import CheckpointError, load_key_for_key
from policies.vla.weights import read_json as _json

IMAGE_PREFIX = "observation.images."


@dataclass(frozen=True)
class SmolVLACheckpoint:
    folder: Path
    vlm_folder: Path
    dims: SmolVLADims
    cameras: tuple[str, ...]
    image_size: tuple[int, int]  # resize_imgs_with_padding (height, width)
    token_length: int
    state_norm: Normalization
    action_norm: Normalization
    action_dim: int


def is_smolvla_folder(folder: str | Path) -> bool:
    config = Path(folder) / "config.json"
    return config.is_file() and _json(config).get("type") == "smolvla"


def _vlm_folder(folder: Path, name: str, vlm_dir: str | Path | None) -> Path:
    candidates = [Path(vlm_dir)] if vlm_dir else [Path(name), folder / name, folder.parent / name]
    for candidate in candidates:
        if (candidate / "config.json").is_file():
            return candidate
    raise CheckpointError(
        f"{folder}: its VLM {name!r} is not a local folder (looked in {[str(c) for c in candidates]}); "
        "pass the SmolVLM folder with --vlm / policy.vla.tokenizer"
    )


def read_checkpoint(folder: str | Path, vlm_dir: str | Path | None = None) -> SmolVLACheckpoint:
    folder = Path(folder)
    config = _json(folder / "config.json")
    if config.get("type") != "smolvla":
        raise CheckpointError(f"{folder}: LeRobot policy type {config.get('type')!r} is not 'smolvla'")
    if "cross" not in config.get("attention_mode", "cross_attn"):
        raise CheckpointError(
            f"{folder}: attention_mode {config.get('attention_mode')!r}: only cross_attn is supported"
        )
    if config.get("add_image_special_tokens") or int(config.get("prefix_length", -1)) > 0:
        raise CheckpointError(f"{folder}: add_image_special_tokens / prefix_length are not supported")
    if int(config.get("num_expert_layers", -1)) > 0:
        raise CheckpointError(
            f"{folder}: num_expert_layers > 0 (an expert shallower than the VLM) is not supported"
        )
    vlm_folder = _vlm_folder(folder, config.get("vlm_model_name", ""), vlm_dir)
    dims = SmolVLADims(
        vlm_config=_json(vlm_folder / "config.json"),
        num_vlm_layers=int(config.get("num_vlm_layers", 16)),
        expert_width_multiplier=float(config.get("expert_width_multiplier", 0.75)),
        self_attn_every_n_layers=int(config.get("self_attn_every_n_layers", 2)),
        chunk_size=int(config["chunk_size"]),
        max_state_dim=int(config.get("max_state_dim", 32)),
        max_action_dim=int(config.get("max_action_dim", 32)),
        num_steps=int(config.get("num_steps", 10)),
        min_period=float(config.get("min_period", 4e-3)),
        max_period=float(config.get("max_period", 4.0)),
    )
    features = config.get("input_features", {})
    cameras = tuple(k.removeprefix(IMAGE_PREFIX) for k, v in features.items() if v.get("type") == "VISUAL")
    action = config.get("output_features", {}).get("action")
    if "observation.state" not in features or action is None:
        raise CheckpointError(
            f"{folder}/config.json: needs input_features['observation.state'] and output_features['action']"
        )
    tokenizer_step = (_processor_step(folder, "policy_preprocessor*.json", "tokenizer_processor") or {}).get(
        "config", {}
    )
    pre = _processor_step(folder, "policy_preprocessor*.json", "normalizer_processor")
    post = _processor_step(folder, "policy_postprocessor*.json", "unnormalizer_processor")
    height, width = config.get("resize_imgs_with_padding") or (512, 512)
    return SmolVLACheckpoint(
        folder=folder,
        vlm_folder=vlm_folder,
        dims=dims,
        cameras=cameras,
        image_size=(int(height), int(width)),
        token_length=int(tokenizer_step.get("max_length", config.get("tokenizer_max_length", 48))),
        state_norm=_lerobot_norm(folder, pre, "observation.state", "STATE", config),
        action_norm=_lerobot_norm(folder, post, "action", "ACTION", config),
        action_dim=int(action["shape"][0]),
    )


def load_weights(model: SmolVLAFlow, folder: Path, dtype: torch.dtype, device: str | torch.device) -> None:
    path = folder / "model.safetensors"
    if not path.is_file():
        raise CheckpointError(f"{folder}: no model.safetensors")
    load_key_for_key(model, [path], dtype, device, prefix="model.")


def resize_with_pad(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """SmolVLA's resize (bilinear, aspect kept) padded with 0 on the left and top: [B, 3, h, w] in [0, 1]."""
    h, w = images.shape[-2:]
    if (h, w) == (height, width):
        return images
    ratio = max(w / width, h / height)
    new_h, new_w = int(h / ratio), int(w / ratio)
    resized = functional.interpolate(images, size=(new_h, new_w), mode="bilinear", align_corners=False)
    return functional.pad(resized, (max(0, width - new_w), 0, max(0, height - new_h), 0), value=0.0)


@dataclass(frozen=True)
class SmolVLAInputs:
    images: list[torch.Tensor]  # per camera [B, 3, H, W] in [-1, 1]
    camera_masks: list[torch.Tensor]
    tokens: torch.Tensor  # [B, L], right-padded to the longest
    token_mask: torch.Tensor
    state: torch.Tensor  # [B, max_state_dim], normalised and padded


@dataclass
class LoadedSmolVLA:
    model: SmolVLAFlow
    checkpoint: SmolVLACheckpoint
    tokenizer: Any

    @property
    def device(self) -> torch.device:
        return self.model.state_proj.weight.device

    def inputs(self, images: dict[str, torch.Tensor], state: torch.Tensor, tasks: list[str]) -> SmolVLAInputs:
        """uint8 images [B, 3, H, W] by camera name (the checkpoint's order), raw state, one task per row."""
        c = self.checkpoint
        missing = [name for name in c.cameras if name not in images]
        if missing:
            raise ValueError(
                f"no image for camera {missing[0]!r}; the checkpoint's cameras: {list(c.cameras)}"
            )
        pixels, masks = [], []
        for name in c.cameras:
            x = images[name]
            x = x.permute(0, 3, 1, 2) if x.shape[-1] == 3 and x.shape[1] != 3 else x
            pixels.append((resize_with_pad(x.float() / 255.0, *c.image_size) * 2.0 - 1.0).to(self.device))
            masks.append(torch.ones(x.shape[0], dtype=torch.bool, device=self.device))
        prompts = [t if t.endswith("\n") else f"{t}\n" for t in tasks]  # smolvla_new_line_processor
        tok = self.tokenizer(prompts, padding="longest", padding_side="right", truncation=True,
                             max_length=c.token_length, return_tensors="pt")  # fmt: skip
        normalized = c.state_norm.normalize(state.float())
        return SmolVLAInputs(
            pixels, masks, tok.input_ids.to(self.device), tok.attention_mask.bool().to(self.device),
            pad_to(normalized, c.dims.max_state_dim).to(self.device),
        )  # fmt: skip

    def prefix(self, batch: SmolVLAInputs) -> SmolVLAPrefix:
        return self.model.encode_prefix(
            batch.images, batch.camera_masks, batch.tokens, batch.token_mask, batch.state
        )

    @torch.no_grad()
    def sample(self, batch: SmolVLAInputs, noise: torch.Tensor) -> dict[str, torch.Tensor]:
        chunk, v_t1 = euler_sample(
            self.model, self.prefix(batch), noise.to(self.device), self.checkpoint.dims.num_steps
        )
        actions = self.checkpoint.action_norm.unnormalize(chunk[..., : self.checkpoint.action_dim])
        return {"action_chunk": actions, "actions_padded_normalized": chunk, "v_t1": v_t1,
                "state_padded_normalized": batch.state}  # fmt: skip


def load_smolvla(
    folder: str | Path,
    vlm_dir: str | Path | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> LoadedSmolVLA:
    from transformers import AutoTokenizer

    checkpoint = read_checkpoint(folder, vlm_dir)
    model = build_smolvla(checkpoint.dims)
    load_weights(model, checkpoint.folder, dtype, device)
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.vlm_folder), local_files_only=True)
    return LoadedSmolVLA(model.eval(), checkpoint, tokenizer)
