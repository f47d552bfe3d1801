"""``SmolVLAPolicy``: SmolVLA (a LeRobot checkpoint, or ``tiny:smolvla``) behind the policy
interface, with :class:`PiPolicy`'s Flow-SDE sampler, value head, SFT loss and save / load.

What differs from π0 is the model and its inputs: every camera goes through SmolVLM's vision model
and connector (a camera of the checkpoint's that the env lacks is left out, as LeRobot does with
``empty_cameras=0``), the prompt is the task plus a newline, and the state is a prefix token, so
the expert takes none. LoRA adapts the SmolVLM's and the expert's Llama projections; the vision
model stays frozen unless ``policy.vla.train_vision``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from policies.base import to_tensors
from policies.config import PolicyConfig
from policies.normalization import RunningNormalizer
from policies.vla.pi.inputs import pad_to
from policies.vla.pi.policy import LORA_TARGETS, PiPolicy
from policies.vla.smolvla.loaded import is_smolvla_folder, load_weights, read_checkpoint, resize_with_pad
from policies.vla.smolvla.model import SmolVLADims, SmolVLAPrefix, build_smolvla
from policies.vla.weights import CheckpointError

TINY_BACKBONE = "tiny:smolvla"
TINY_IMAGE = 64  # 4 x 4 patches of 16, pixel-shuffled by 2: 4 image tokens per camera
TINY_TOKENS = 48


def is_smolvla_config(cfg: PolicyConfig) -> bool:
    if cfg.vla.checkpoint:
        return is_smolvla_folder(cfg.vla.checkpoint)
    return cfg.vla.backbone == TINY_BACKBONE


def _random_init(model: nn.Module, seed: int = 0) -> None:
    """Fill meta parameters with a small random init: norms at one (Llama's RMSNorm and LayerNorm
    scale by their weight), biases at zero."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name, param in model.named_parameters():
        if name.endswith(("norm.weight", "layernorm.weight", "layer_norm1.weight", "layer_norm2.weight")):
            weights[name] = torch.ones(param.shape)
        elif name.endswith("bias"):
            weights[name] = torch.zeros(param.shape)
        else:
            weights[name] = torch.randn(param.shape, generator=generator) * 0.02
    model.load_state_dict(weights, strict=True, assign=True)


def tiny_vlm_config(vocab_size: int, image_token_id: int) -> dict[str, Any]:
    text = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=vocab_size)  # fmt: skip
    vision = dict(model_type="smolvlm_vision", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, patch_size=16, image_size=TINY_IMAGE)  # fmt: skip
    return dict(
        model_type="smolvlm",
        scale_factor=2,
        image_token_id=image_token_id,
        text_config=text,
        vision_config=vision,
    )


class SmolVLAPolicy(PiPolicy):
    def _init_checkpoint(self, folder: Path, weights: bool) -> None:
        from transformers import AutoTokenizer

        vla = self.cfg.vla
        checkpoint = read_checkpoint(folder, vla.tokenizer or None)
        state_dim = checkpoint.state_norm.dim
        if checkpoint.action_dim != self.action_dim or (
            state_dim is not None and state_dim != self.spec.state_dim
        ):
            raise CheckpointError(
                f"policy.vla.checkpoint={str(folder)!r}: its norm stats are for state {state_dim} / action "
                f"{checkpoint.action_dim} dims; the env has {self.spec.state_dim} / {self.action_dim}"
            )
        self.checkpoint, self.dims, self.slots = checkpoint, checkpoint.dims, checkpoint.cameras
        self.image_size, self.token_length = checkpoint.image_size, checkpoint.token_length
        self.tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.vlm_folder), local_files_only=True)
        self.model = build_smolvla(self.dims)
        dtype = torch.bfloat16 if vla.dtype == "bfloat16" else torch.float32
        if weights:
            load_weights(self.model, checkpoint.folder, dtype, "cpu")
        else:
            _random_init(self.model)  # the saved policy's weights come next
        self.state_norm = None

    def _init_tiny(self, backbone: str) -> None:
        from policies.vla.tiny import IMAGE_TOKEN, word_tokenizer

        self.checkpoint, self.slots = None, tuple(self.cfg.cameras)
        self.tokenizer = word_tokenizer(0)
        self.image_size, self.token_length = (TINY_IMAGE, TINY_IMAGE), TINY_TOKENS
        vlm = tiny_vlm_config(len(self.tokenizer), self.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN))
        self.dims = SmolVLADims(vlm_config=vlm, num_vlm_layers=2, chunk_size=self.cfg.chunk_size,
                                max_state_dim=max(32, self.spec.state_dim),
                                max_action_dim=max(32, self.spec.action.dim))  # fmt: skip
        self.model = build_smolvla(self.dims)
        _random_init(self.model)
        self.state_norm = RunningNormalizer(self.spec.state_dim)

    def _prefix_width(self) -> int:
        return self.model.vlm_with_expert.vlm.config.text_config.hidden_size

    def _vision_module(self) -> nn.Module:
        return self.model.vlm_with_expert.vlm.model.vision_model

    def vlm_module(self) -> nn.Module:
        return self.model.vlm_with_expert.vlm

    def expert_module(self) -> nn.Module:
        return self.model.vlm_with_expert.lm_expert

    def _add_lora(self, rank: int) -> None:
        """LoRA on the Llama projections of the SmolVLM text model and of the expert; the rest frozen
        but the action and state projections, which stay trainable."""
        from peft import LoraConfig, inject_adapter_in_model

        config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=LORA_TARGETS)
        vlm = self.model.vlm_with_expert.vlm
        vlm.requires_grad_(False)
        for module in (vlm.model.text_model, self.expert_module()):
            inject_adapter_in_model(config, module)
            for name, param in module.named_parameters():
                param.requires_grad_("lora_" in name)

    def _state_for_expert(self, state: torch.Tensor) -> None:
        return None  # SmolVLA's state is a prefix token

    def _prefix(self, obs: dict[str, Any]) -> tuple[SmolVLAPrefix, torch.Tensor]:
        obs = to_tensors(obs, self.device)
        state = obs["state"].float()
        batch = state.shape[0]
        dtype = next(self.model.parameters()).dtype
        images, masks = [], []
        for camera in self.cfg.cameras:
            x = obs["images"][camera]
            x = x.permute(0, 3, 1, 2) if x.shape[-1] == 3 and x.shape[1] != 3 else x
            images.append((resize_with_pad(x.float() / 255.0, *self.image_size) * 2.0 - 1.0).to(dtype))
            masks.append(torch.ones(batch, dtype=torch.bool, device=self.device))
        tasks = list(obs.get("instruction") or []) or [self.spec.instruction] * batch
        prompts = [t if t.endswith("\n") else f"{t}\n" for t in tasks]
        tok = self.tokenizer(prompts, padding="longest", padding_side="right", truncation=True,
                             max_length=self.token_length, return_tensors="pt")  # fmt: skip
        normalized = pad_to(self._normalized_state(state), self.dims.max_state_dim)
        prefix = self.model.encode_prefix(
            images,
            masks,
            tok.input_ids.to(self.device),
            tok.attention_mask.bool().to(self.device),
            normalized,
        )
        return prefix, normalized
