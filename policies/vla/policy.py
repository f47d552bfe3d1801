"""``VLAPolicy``: a vision-language backbone reading the cameras, the instruction and the robot
state, with an OpenVLA token head or a pi0 flow head, and a value head for PPO.

The prompt the text model reads is ``[image patches of each camera] [instruction tokens] [state]``:
the images through the backbone's vision tower and projector, the instruction through its own
tokenizer (left-padded within its block; position ids skip the padding), and the normalised state
as one projected embedding or one token per state field (``policy.vla.state_tokens``, see
:mod:`policies.vla.state_tokens`; pi0 feeds proprioception; OpenVLA does not, but our tasks need it).
The value head reads the last prompt position's hidden state.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from policies.base import Policy, PolicyEvaluation, PolicyOutput, check_cameras, to_tensors
from policies.config import PolicyConfig
from policies.normalization import RunningNormalizer
from policies.vla.action_tokens import ActionTokenizer
from policies.vla.backbone import VisionLanguageBackbone, load_backbone
from policies.vla.flow_head import FlowActionHead, FlowSchedule
from policies.vla.state_tokens import make_state_tokens
from policies.vla.token_head import Prefix, TokenActionHead
from protos import EnvSpec

BACKBONE_DIR = "backbone"  # inside a saved policy: the backbone's config, tokenizer and processor


def prompt(instruction: str) -> str:
    """OpenVLA's prompt around the task text."""
    return f"In: What action should the robot take to {instruction.strip().lower()}?\nOut:"


class VLAPolicy(Policy):
    """A VLA behind the policy interface: ``act`` decodes a chunk, ``evaluate`` scores one."""

    def __init__(self, spec: EnvSpec, cfg: PolicyConfig, saved: Path | None = None) -> None:
        super().__init__()
        self.spec, self.cfg, vla = spec, cfg, cfg.vla
        self.chunk_size, self.action_dim = cfg.chunk_size, spec.action.dim
        check_cameras(cfg.cameras, spec)
        source = str(saved / BACKBONE_DIR) if saved is not None else vla.backbone
        model, tokenizer, processor = load_backbone(source, vla.action_bins, weights=saved is None)
        self.backbone = VisionLanguageBackbone(model, tokenizer, processor)
        hidden = self.backbone.hidden_size
        self.state_norm = RunningNormalizer(spec.state_dim)
        self.state_proj = make_state_tokens(vla.state_tokens, spec, hidden, tokenizer)
        self.value_head = (
            nn.Sequential(nn.Linear(hidden, 256), nn.Tanh(), nn.Linear(256, 1)) if cfg.value_head else None
        )
        slots = cfg.chunk_size * self.action_dim
        if vla.head == "tokens":
            positions = int(model.config.text_config.max_position_embeddings)
            if slots + vla.max_instruction_tokens + 64 > positions:
                raise ValueError(
                    f"policy.chunk_size={cfg.chunk_size}: the tokens head would decode {slots} tokens "
                    f"({cfg.chunk_size} x {self.action_dim}), more than the backbone's {positions} positions allow"
                )
            tokens = ActionTokenizer.at_end_of(self.backbone.vocab_size, vla.action_bins)
            self.head = TokenActionHead(self.backbone, tokens, slots, vla.parallel_decoding)
        else:
            schedule = FlowSchedule(vla.flow_steps, vla.flow_noise_level)
            self.head = FlowActionHead(
                hidden, self.action_dim, cfg.chunk_size, vla.expert_width, vla.expert_layers, schedule
            )
        if vla.lora_rank > 0:
            self._add_lora(vla.lora_rank)
        if vla.dtype == "bfloat16":
            self.backbone.model.to(torch.bfloat16)
        if vla.gradient_checkpointing:
            self.backbone.model.gradient_checkpointing_enable()

    def _add_lora(self, rank: int) -> None:
        """LoRA adapters on the text model's attention and MLP projections; the vision tower and the
        text model's own weights are frozen (the projector, state, heads and adapters train)."""
        from peft import LoraConfig, get_peft_model

        inner = self.backbone.model.model
        config = LoraConfig(
            r=rank,
            lora_alpha=2 * rank,
            lora_dropout=0.0,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        )
        inner.language_model = get_peft_model(inner.language_model, config)
        inner.vision_tower.requires_grad_(False)

    # -- the prompt ----------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.state_norm.mean.device

    def prefix(self, obs: dict[str, Any]) -> Prefix:
        """Embeddings and mask of ``[images] [instruction] [state]`` for a batch of observations."""
        state = obs["state"]
        batch = state.shape[0]
        parts = []
        for camera in self.cfg.cameras:
            pixels = self.backbone.preprocess(obs["images"][camera], camera).to(self.backbone.dtype)
            parts.append(self.backbone.embed_images(pixels).float())
        images = torch.cat(parts, dim=1)
        instructions = list(obs.get("instruction") or []) or [self.spec.instruction] * batch
        ids, text_mask = self.backbone.tokenize(
            [prompt(text) for text in instructions], self.cfg.vla.max_instruction_tokens, self.device
        )
        text = self.backbone.embed_tokens(ids).float()
        state = self.state_norm(state.float()) if self.cfg.normalize_state else state.float()
        state_tokens = self.state_proj(state, self.backbone.embed_tokens)
        ones = lambda n: torch.ones(batch, n, dtype=text_mask.dtype, device=self.device)  # noqa: E731
        return Prefix(
            torch.cat([images, text, state_tokens], dim=1),
            torch.cat([ones(images.shape[1]), text_mask, ones(state_tokens.shape[1])], dim=1),
        )

    def _as_tensors(self, obs: dict[str, Any]) -> dict[str, Any]:
        return to_tensors(obs, self.device)

    def _value(self, prefix_hidden: torch.Tensor) -> torch.Tensor | None:
        """The value head on the last prompt state; with ``detach_value_head`` the critic's gradients
        stop there, so fitting a fresh critic does not move the SFT backbone (measured on PickColor,
        PPO from a 0.27 SFT start: 0.54 detached, 0.35 not; flow head 0.375 -> 1.00 detached)."""
        if self.value_head is None:
            return None
        if self.cfg.vla.detach_value_head:
            prefix_hidden = prefix_hidden.detach()
        return self.value_head(prefix_hidden).squeeze(-1)

    def _prefix_states(self, prefix: Prefix) -> torch.Tensor:
        hidden, _ = self.backbone.run(prefix.embeddings, prefix.mask, prefix.positions)
        return hidden

    # -- the interface -----------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: dict[str, Any], mode: str = "sample") -> PolicyOutput:
        if mode not in ("sample", "greedy"):
            raise ValueError(f"mode must be 'sample' or 'greedy', got {mode!r}")
        prefix = self.prefix(self._as_tensors(obs))
        greedy = mode == "greedy"
        if isinstance(self.head, TokenActionHead):
            decoded = self.head.decode(self.backbone, prefix, greedy)
            samples = decoded.bins.reshape(-1, self.chunk_size, self.action_dim)
            unit = self.head.tokens.centers(samples)
            return PolicyOutput(
                self.to_env_units(unit), samples.float(), decoded.log_prob, self._value(decoded.prefix_hidden)
            )
        states = self._prefix_states(prefix)
        chain, log_prob = self.head.sample(states, prefix.mask, greedy)
        return PolicyOutput(
            self.to_env_units(FlowActionHead.actions_of(chain)), chain, log_prob, self._value(states[:, -1])
        )

    def evaluate(self, obs: dict[str, Any], samples: torch.Tensor) -> PolicyEvaluation:
        prefix = self.prefix(self._as_tensors(obs))
        samples = samples.to(self.device)
        if isinstance(self.head, TokenActionHead):
            scored = self.head.score(self.backbone, prefix, samples.long().flatten(1))
            return PolicyEvaluation(scored.log_prob, scored.entropy, self._value(scored.prefix_hidden))
        states = self._prefix_states(prefix)
        log_prob, entropy = self.head.score(states, prefix.mask, samples)
        return PolicyEvaluation(log_prob, entropy, self._value(states[:, -1]))

    def value(self, obs: dict[str, Any]) -> torch.Tensor:
        if self.value_head is None:
            raise ValueError("this policy has no value head (policy.value_head=false)")
        return self._value(self._prefix_states(self.prefix(self._as_tensors(obs)))[:, -1])

    def imitation_loss(
        self, obs: dict[str, Any], unit_targets: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        prefix = self.prefix(self._as_tensors(obs))
        if isinstance(self.head, TokenActionHead):
            return self.head.imitation_loss(self.backbone, prefix, unit_targets, valid)
        return self.head.imitation_loss(self._prefix_states(prefix), prefix.mask, unit_targets, valid)

    @property
    def cameras(self) -> list[str]:
        return list(self.cfg.cameras)

    @property
    def has_value_head(self) -> bool:
        return self.value_head is not None

    def update_normalizers(self, obs: dict[str, Any]) -> None:
        if self.cfg.normalize_state:
            self.state_norm.update(self._as_tensors(obs)["state"])

    def config_dict(self) -> dict[str, Any]:
        return asdict(self.cfg)

    def save_extras(self, folder: Path) -> None:
        """The backbone's config, tokenizer and image processor (its weights are in the policy's)."""
        target = folder / BACKBONE_DIR
        self.backbone.model.config.save_pretrained(target)
        self.backbone.tokenizer.save_pretrained(target)
        self.backbone.image_processor.save_pretrained(target)
