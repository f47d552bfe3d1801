"""``OpenVLAPolicy``: OpenVLA and OpenVLA-OFT (a published checkpoint, or ``tiny:openvla`` /
``tiny:openvla-oft``) behind the policy interface, RL-ready as RLinf does it.

OpenVLA: one action per step (``chunk_size=1``), written as ``action_dim`` tokens after the prompt;
``act`` decodes with the KV cache, ``evaluate`` re-scores the stored tokens in one teacher-forced
pass. OFT (``parallel_decoding``, or a folder with OFT's heads): RLinf's token variant of OFT, a
whole chunk of ``chunk_size * action_dim`` tokens from one bidirectional pass over zeroed
placeholders (:func:`parallel_pass`), with OFT's proprio token where there is a projector; the
pass does not depend on the tokens, so ``evaluate`` is that same pass. Sampling and scoring use the
logits masked to the ``n_action_bins`` action ids (RLinf's OpenVLA PPO / GRPO). A value head reads the last prompt position's hidden state. Samples are the token ids, stored
as floats (exact below 2**24). A checkpoint's ``norm_stats[unnorm_key]`` map the bins to env units
(then clipped into the spec's bounds); ``tiny:openvla`` acts in [-1, 1] units.

The vision backbone is frozen unless ``policy.vla.train_vision``; the ViT parts upstream stores but
never runs (:meth:`OpenVLA.stored_only`) are always frozen. LoRA (peft) goes on the Llama's
projections only.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

from policies.base import Policy, PolicyEvaluation, PolicyOutput, to_tensors
from policies.config import PolicyConfig
from policies.normalization import RunningNormalizer
from policies.vla.openvla.checkpoint import (
    OpenVLACheckpoint,
    is_openvla_folder,
    load_weights,
    read_checkpoint,
)
from policies.vla.openvla.inputs import normalize, pixels, tokenize
from policies.vla.openvla.loaded import build_and_read_film, load_tokenizer
from policies.vla.openvla.model import Prompt, build_model, generate
from policies.vla.openvla.oft import (
    ProprioProjector,
    has_oft_heads,
    load_component,
    normalize_proprio,
    parallel_pass,
)
from policies.vla.openvla.vision import TIMM_VITS
from policies.vla.weights import CheckpointError
from protos import EnvSpec

TINY_BACKBONES = ("tiny:openvla", "tiny:openvla-oft")
TINY_IMAGE = 56
TINY_VITS = {
    "vit_large_patch14_reg4_dinov2.lvd142m": {"embed_dim": 32, "depth": 2, "num_heads": 2},
    "vit_so400m_patch14_siglip_224": {"embed_dim": 48, "depth": 2, "num_heads": 2},
}
TINY_LLAMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, max_position_embeddings=512)  # fmt: skip
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def is_openvla_config(cfg: PolicyConfig) -> bool:
    if cfg.vla.checkpoint:
        return is_openvla_folder(cfg.vla.checkpoint)
    return cfg.vla.backbone in TINY_BACKBONES


def tiny_checkpoint(vocab_size: int) -> OpenVLACheckpoint:
    """A tiny OpenVLA with upstream's structure: fused DINOv2 + SigLIP at 56 px, a 2-layer Llama whose
    last 256 ids are the action tokens."""
    import dataclasses

    vits = [dataclasses.replace(TIMM_VITS[i], image_size=TINY_IMAGE, **TINY_VITS[i]) for i in TINY_VITS]
    return OpenVLACheckpoint(
        folder=Path("tiny:openvla"),
        featurizer=vits[0],
        fused_featurizer=vits[1],
        text_config=dict(TINY_LLAMA, vocab_size=vocab_size),
        n_action_bins=256,
        pad_to_multiple_of=0,
        resize_strategy="resize-naive",
        image_sizes=(TINY_IMAGE, TINY_IMAGE),
        pixel_means=((0.485, 0.456, 0.406), (0.5, 0.5, 0.5)),
        pixel_stds=((0.229, 0.224, 0.225), (0.5, 0.5, 0.5)),
        norm_stats={},
        config={},
    )


def _random_init(model: nn.Module, seed: int = 0) -> None:
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name, param in model.named_parameters():
        if name.endswith(("norm.weight", "norm1.weight", "norm2.weight", "layernorm.weight")):
            value = torch.ones(param.shape)
        elif name.endswith(("bias", "scale_factor")):
            value = torch.zeros(param.shape) if name.endswith("bias") else torch.full(param.shape, 0.1)
        else:
            value = torch.randn(param.shape, generator=generator) * 0.02
        weights[name] = value
    model.load_state_dict(weights, strict=True, assign=True)


class OpenVLAPolicy(Policy):
    def __init__(self, spec: EnvSpec, cfg: PolicyConfig, saved: Path | None = None) -> None:
        super().__init__()
        self.spec, self.cfg, vla = spec, cfg, cfg.vla
        self.chunk_size, self.action_dim = 1, spec.action.dim
        if vla.train_expert_only:
            raise ValueError(
                "policy.vla.train_expert_only is for the flow families (π0, π0.5, SmolVLA); OpenVLA has no action expert"
            )
        if vla.sampling_temperature == 0:
            raise ValueError(
                "policy.vla.sampling_temperature=0 is for the flow families (chains from x0 = 0); OpenVLA samples "
                "softmax(logits / T) and needs T > 0"
            )
        if len(cfg.cameras) != 1 or cfg.cameras[0] not in spec.camera_names:
            raise ValueError(
                f"OpenVLA sees one camera: set policy.cameras to one of the env's {list(spec.camera_names)} "
                f"(got {list(cfg.cameras)})"
            )
        folder = Path(vla.checkpoint) if vla.checkpoint else None
        oft_folder = folder is not None and has_oft_heads(folder)
        self.parallel = (
            vla.parallel_decoding or oft_folder or (folder is None and vla.backbone == "tiny:openvla-oft")
        )
        if cfg.chunk_size != 1 and not self.parallel:
            raise ValueError(
                f"OpenVLA predicts one action per step: set policy.chunk_size=1 (got {cfg.chunk_size}), "
                "or policy.vla.parallel_decoding=true for OFT's chunks"
            )
        self.chunk_size, self.proprio, self.proprio_stats = cfg.chunk_size, None, None
        self.film_layout = None  # OFT with FiLM: how to write its vision backbone file back
        if folder is not None:
            self.checkpoint = read_checkpoint(folder, vla.dims or None)
            if oft_folder and (folder / "dataset_statistics.json").is_file():  # OFT's statistics win
                import dataclasses
                import json

                stats = json.loads((folder / "dataset_statistics.json").read_text())
                self.checkpoint = dataclasses.replace(self.checkpoint, norm_stats=stats)
            self.stats = self.checkpoint.action_stats(vla.unnorm_key or None)
            if self.stats.dim != self.action_dim:
                raise CheckpointError(
                    f"policy.vla.checkpoint={str(folder)!r}: its action statistics have {self.stats.dim} dims, "
                    f"the env's action has {self.action_dim}"
                )
            self.tokenizer = load_tokenizer(folder, vla.tokenizer or None)
            self.model, film_tensors, self.film_layout = build_and_read_film(self.checkpoint)
            dtype = torch.bfloat16 if vla.dtype == "bfloat16" else torch.float32
            if saved is None:
                load_weights(self.model, folder, dtype, "cpu", film_tensors)
            else:
                _random_init(self.model)  # the saved policy's weights come next
            if oft_folder:
                self._init_oft_proprio(folder, saved is None)
        else:
            from policies.vla.tiny import word_tokenizer

            self.tokenizer = word_tokenizer(256)
            self.checkpoint, self.stats = tiny_checkpoint(len(self.tokenizer)), None
            self.model = build_model(self.checkpoint)
            _random_init(self.model)
            if self.parallel:
                width = self.model.language_model.config.hidden_size
                self.proprio = ProprioProjector(width, spec.state_dim)
                self.state_norm = RunningNormalizer(spec.state_dim)
        bins = self.checkpoint.n_action_bins
        first = self.checkpoint.vocab_size - bins
        self.register_buffer("action_ids", torch.arange(first, first + bins), persistent=False)
        width = self.model.language_model.config.hidden_size
        self.value_head = (
            nn.Sequential(nn.Linear(width, 256), nn.Tanh(), nn.Linear(256, 1)) if cfg.value_head else None
        )
        if not vla.train_vision:
            self.model.vision_backbone.requires_grad_(False)
        for module in self.model.stored_only():
            module.requires_grad_(False)
        if vla.lora_rank > 0:
            self._add_lora(vla.lora_rank)

    def _init_oft_proprio(self, folder: Path, weights: bool) -> None:
        """OFT's proprio projector (when the folder has one) on the env's state."""
        files = sorted(folder.glob("proprio_projector--*_checkpoint.pt"))
        if not files:
            return
        state = load_component(files[-1])
        width = self.model.language_model.config.hidden_size
        proprio_dim = state["fc1.weight"].shape[1] if "fc1.weight" in state else -1
        if proprio_dim != self.spec.state_dim:
            raise CheckpointError(
                f"{files[-1]}: takes a {proprio_dim}-dim state, the env's is {self.spec.state_dim}"
            )
        self.proprio = ProprioProjector(width, proprio_dim)
        if weights:
            self.proprio.load_state_dict(state)
        self.proprio_stats = self.checkpoint.norm_stats[self.unnorm_key]["proprio"]

    @property
    def unnorm_key(self) -> str:
        return self.cfg.vla.unnorm_key or self.checkpoint.unnorm_keys()[0]

    def _add_lora(self, rank: int) -> None:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=LORA_TARGETS)
        self.model.language_model = get_peft_model(self.model.language_model, config)

    @property
    def device(self) -> torch.device:
        return self.model.projector.fc1.weight.device

    # -- observations -> the prompt ------------------------------------------------------------
    def _prompt(self, obs: dict[str, Any]) -> tuple[Prompt, int]:
        obs = to_tensors(obs, self.device)
        images = obs["images"][self.cfg.cameras[0]]
        batch = images.shape[0]
        c = self.checkpoint
        pixel_values = pixels(images, c.image_sizes, c.resize_strategy, c.pixel_means, c.pixel_stds)
        instructions = list(obs.get("instruction") or []) or [self.spec.instruction] * batch
        if self.parallel and self.stats is not None:
            instructions = [text.lower() for text in instructions]  # as OFT's get_vla_action
        tokens, mask = tokenize(self.tokenizer, instructions, action_start=c.vocab_size > 29871)
        extra = None
        if self.proprio is not None:
            state = obs["state"].float()
            if self.proprio_stats is not None:
                state = torch.as_tensor(
                    normalize_proprio(state.cpu().double().numpy(), self.proprio_stats), dtype=torch.float32
                ).to(self.device)
            elif self.cfg.normalize_state:
                state = self.state_norm(state)
            extra = self.proprio(state)[:, None]
        prompt = self.model.prompt(
            pixel_values.to(self.device), tokens.to(self.device), mask.to(self.device), extra
        )
        return prompt, prompt.embeds.shape[1]

    def _parallel(self, obs: dict[str, Any], temperature: float) -> tuple[Categorical, torch.Tensor]:
        """OFT: the action distributions of every token of the chunk, and the last prompt state."""
        prompt, _ = self._prompt(obs)
        logits, _, prompt_state = parallel_pass(self.model, prompt, self.chunk_size * self.action_dim)
        return Categorical(logits=self._action_logits(logits, temperature)), prompt_state

    def update_normalizers(self, obs: dict[str, Any]) -> None:
        if self.proprio is not None and self.proprio_stats is None and self.cfg.normalize_state:
            self.state_norm.update(to_tensors(obs, self.device)["state"])

    def _action_logits(self, logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """Logits over the action ids only, divided by ``temperature``: [..., n_action_bins] (bin k is
        id ``action_ids[k]``)."""
        return logits.float().index_select(-1, self.action_ids) / temperature

    def _value(self, prompt_state: torch.Tensor) -> torch.Tensor | None:
        if self.value_head is None:
            return None
        state = prompt_state.float()
        return self.value_head(state.detach() if self.cfg.vla.detach_value_head else state).squeeze(-1)

    def env_actions(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Token ids [B, chunk, A] -> env actions, by upstream's bins (and ``norm_stats`` for a checkpoint)."""
        from policies.vla.openvla.inputs import tokens_to_normalized, unnormalize

        normalized = tokens_to_normalized(
            token_ids.long(), self.checkpoint.vocab_size, self.checkpoint.n_action_bins
        )
        if self.stats is None:
            return self.to_env_units(
                torch.as_tensor(normalized, dtype=torch.float32, device=token_ids.device)
            )
        actions = np.clip(
            unnormalize(normalized, self.stats), self.spec.action.low_array(), self.spec.action.high_array()
        )
        return torch.as_tensor(actions, dtype=torch.float32, device=token_ids.device)

    # -- the interface -------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: dict[str, Any], mode: str = "sample") -> PolicyOutput:
        if mode not in ("sample", "greedy"):
            raise ValueError(f"mode must be 'sample' or 'greedy', got {mode!r}")
        ids, temperature = self.action_ids, self.cfg.vla.sampling_temperature
        if self.parallel:
            dist, prompt_state = self._parallel(obs, temperature)
            bins = dist.probs.argmax(-1) if mode == "greedy" else dist.sample()
            terms, tokens = dist.log_prob(bins), ids[bins]
        else:
            prompt, _ = self._prompt(obs)

            def choose(logits: torch.Tensor) -> torch.Tensor:
                action_logits = self._action_logits(logits, temperature)
                chosen = (
                    action_logits.argmax(-1)
                    if mode == "greedy"
                    else Categorical(logits=action_logits).sample()
                )
                return ids[chosen]

            tokens, logits, prompt_state = generate(self.model, prompt, self.action_dim, choose)
            terms = Categorical(logits=self._action_logits(logits, temperature)).log_prob(tokens - ids[0])
        samples = tokens.reshape(-1, self.chunk_size, self.action_dim).float()
        return PolicyOutput(
            self.env_actions(samples), samples, terms.sum(-1), self._value(prompt_state), terms
        )

    def _teacher_forced(
        self, obs: dict[str, Any], tokens: torch.Tensor, temperature: float
    ) -> tuple[Categorical, torch.Tensor]:
        """One pass over the prompt and ``tokens`` [B, A] but the last: the action distributions at the
        A positions that chose them, and the last prompt position's hidden state."""
        prompt, length = self._prompt(obs)
        follow = self.model.language_model.get_input_embeddings()(tokens[:, :-1])
        ones = torch.ones(follow.shape[:2], dtype=prompt.mask.dtype, device=self.device)
        mask = torch.cat([prompt.mask, ones], dim=1)
        positions = torch.cat([prompt.positions, prompt.positions[:, -1:] + ones.cumsum(1)], dim=1)
        embeds = torch.cat([prompt.embeds, follow.to(prompt.embeds.dtype)], dim=1)
        logits, _, hidden = self.model.run(embeds, mask, positions, hidden=True, keep=tokens.shape[1])
        return Categorical(logits=self._action_logits(logits, temperature)), hidden[:, length - 1]

    def _distribution(
        self, obs: dict[str, Any], tokens: torch.Tensor, temperature: float = 1.0
    ) -> tuple[Categorical, torch.Tensor]:
        if self.parallel:
            return self._parallel(obs, temperature)
        return self._teacher_forced(obs, tokens, temperature)

    def evaluate(self, obs: dict[str, Any], samples: torch.Tensor) -> PolicyEvaluation:
        tokens = samples.to(self.device).long().flatten(1)
        dist, prompt_state = self._distribution(obs, tokens, self.cfg.vla.sampling_temperature)
        terms = dist.log_prob(tokens - self.action_ids[0])
        return PolicyEvaluation(terms.sum(-1), dist.entropy().sum(-1), self._value(prompt_state), terms)

    def value(self, obs: dict[str, Any]) -> torch.Tensor:
        if self.value_head is None:
            raise ValueError("this policy has no value head (policy.value_head=false)")
        if self.parallel:
            return self._value(self._parallel(obs, 1.0)[1])
        prompt, _ = self._prompt(obs)
        _, _, hidden = self.model.run(prompt.embeds, prompt.mask, prompt.positions, hidden=True)
        return self._value(hidden[:, -1])

    def target_tokens(self, unit_targets: torch.Tensor) -> torch.Tensor:
        """Recorded chunks ([B, chunk, A] in [-1, 1]) as upstream's action tokens [B, chunk * A]."""
        from policies.vla.openvla.inputs import normalized_to_tokens

        unit = unit_targets.detach().cpu().double().numpy()
        if self.stats is not None:
            unit = normalize(self.to_env_units(torch.as_tensor(unit)).numpy(), self.stats)
        tokens = normalized_to_tokens(unit, self.checkpoint.vocab_size, self.checkpoint.n_action_bins)
        return torch.as_tensor(tokens, device=self.device).flatten(1)

    def imitation_loss(
        self, obs: dict[str, Any], unit_targets: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """Cross-entropy of the recorded actions' tokens over the action ids, on the valid steps."""
        tokens = self.target_tokens(unit_targets)
        dist, _ = self._distribution(obs, tokens)
        per_token = -dist.log_prob(tokens - self.action_ids[0])
        weights = valid.to(self.device).float().repeat_interleave(self.action_dim, dim=1)
        return (per_token * weights).sum() / weights.sum().clamp(min=1.0)

    @property
    def cameras(self) -> list[str]:
        return list(self.cfg.cameras)

    @property
    def has_value_head(self) -> bool:
        return self.value_head is not None

    def config_dict(self) -> dict[str, Any]:
        return asdict(self.cfg)
