"""``PiPolicy``: a π0 / π0.5 (a published checkpoint, or ``tiny:pi0`` / ``tiny:pi05``) behind the
policy interface, RL-ready.

``act`` samples a chunk with the Flow-SDE (πRL's ``flow_sde``; :class:`FlowSchedule`) or Flow-Noise
(``flow_noise``; :class:`FlowNoiseHead`, a learned std) on top of the real expert: each denoising step
is a Gaussian around the SDE's or the Euler step, noise only in the env's action dimensions (the
padding to ``max_action_dim`` follows its mean), and the chunk's log-prob is the sum of the steps'.
At ``flow_noise_level=0`` the Flow-SDE sampler is upstream's Euler sampler exactly.
``evaluate`` re-scores a stored chain with gradients. A value head reads the PaliGemma's prefix
(masked mean of its last hidden states). The env's cameras fill the checkpoint's camera slots in
order; a real checkpoint's own norm stats map its actions to env units (then clipped into the
spec's bounds); a tiny one acts in [-1, 1] units.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from policies.base import Policy, PolicyEvaluation, PolicyOutput, check_cameras, to_tensors
from policies.config import PolicyConfig
from policies.normalization import RunningNormalizer
from policies.vla.flow_noise import FlowNoiseHead
from policies.vla.flow_sde import FlowSchedule, gaussian_entropy, gaussian_log_prob_terms
from policies.vla.pi.checkpoint import CheckpointError, read_checkpoint
from policies.vla.pi.dims import GemmaDims, PiDims, SiglipDims
from policies.vla.pi.inputs import pad_to, pi0_prompt, pi05_prompt, siglip_pixels, tokenize
from policies.vla.pi.loaded import load_tokenizer
from policies.vla.pi.models import PrefixCache, build_flow_model
from protos import EnvSpec

TINY_FAMILIES = {"tiny:pi0": "pi0", "tiny:pi05": "pi05"}
TINY_GEMMA = GemmaDims(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16)
TINY_EXPERT = GemmaDims(width=32, depth=2, mlp_dim=64, num_heads=8, num_kv_heads=1, head_dim=16)
TINY_SIGLIP = SiglipDims(
    hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=56
)
TINY_TOKENS = 48
# π0.5 writes its state into the prompt, a token per dimension with the tiny tokenizer: room for
# "Task: <instruction>, State: <digits>;\nAction: " without cutting the state off
TINY_PI05_PROMPT_TOKENS = 32
# openpi's quantile normalisation puts a state's 1st..99th percentile on [-1, 1] before it is
# discretised; the tiny π0.5 has a running z-score instead, so ±3σ is put there (at ±1σ a third of
# the values would clip to the end bins)
TINY_PI05_STATE_SIGMAS = 3.0
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _random_init(model: nn.Module, seed: int = 0) -> None:
    """Fill meta parameters with a small random init (tiny models only)."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name, param in model.named_parameters():
        shape = param.shape
        if name.endswith(("layernorm.weight", "norm.weight", "layer_norm1.weight", "layer_norm2.weight")):
            value = torch.zeros(shape) if "vision_tower" not in name else torch.ones(shape)
        elif name.endswith("bias"):
            value = torch.zeros(shape)
        else:
            value = torch.randn(shape, generator=generator) * 0.02
        weights[name] = value
    model.load_state_dict(weights, strict=False, assign=True)


def _order_number_embeddings(embedding: nn.Embedding, tokenizer, frequencies: int = 6) -> None:
    """Give the tiny tokenizer's number tokens " 0" … " 255" embeddings that vary smoothly with
    the number, as a pretrained language model's do. π0.5 reads its state as these digits; from a
    random table a tiny model must learn 256 unrelated vectors per state dimension from the demos
    (measured on PickColor: 4% success after 800 SFT updates, π0 with its state token 92% after 400)."""
    ids = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(f" {number}"))[0] for number in range(256)]
    angles = (
        torch.arange(256, dtype=torch.float32)[:, None] / 255 * math.pi * 2.0 ** torch.arange(frequencies)
    )
    features = torch.cat([angles.sin(), angles.cos()], dim=1)  # [256, 2 * frequencies]
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        weight = embedding.weight
        projection = torch.randn(features.shape[1], weight.shape[1], generator=generator)
        ordered = features @ projection
        weight[ids] = (ordered * (weight.std() / ordered.std())).to(weight.dtype)


def _is_point_mass(std: float | torch.Tensor) -> bool:
    """A step with no noise (Flow-SDE at noise level 0): it is its mean, and has no log-prob."""
    return not isinstance(std, torch.Tensor) and std == 0.0


class PiPolicy(Policy):
    def __init__(self, spec: EnvSpec, cfg: PolicyConfig, saved: Path | None = None) -> None:
        super().__init__()
        self.spec, self.cfg, vla = spec, cfg, cfg.vla
        self.chunk_size, self.action_dim = cfg.chunk_size, spec.action.dim
        check_cameras(cfg.cameras, spec)
        if vla.checkpoint:
            self._init_checkpoint(Path(vla.checkpoint), weights=saved is None)
        else:
            self._init_tiny(vla.backbone)
        dims = self.dims
        if len(cfg.cameras) > len(self.slots):
            raise ValueError(
                f"policy.cameras has {len(cfg.cameras)} cameras; the checkpoint has {len(self.slots)} slots {list(self.slots)}"
            )
        if self.action_dim > dims.max_action_dim or spec.state_dim > dims.max_state_dim:
            raise ValueError(
                f"the env's action ({self.action_dim}) / state ({spec.state_dim}) is wider than the checkpoint's "
                f"max_action_dim={dims.max_action_dim} / max_state_dim={dims.max_state_dim}"
            )
        if cfg.chunk_size != dims.chunk_size:
            raise ValueError(
                f"policy.chunk_size={cfg.chunk_size}; the checkpoint's chunk is {dims.chunk_size}"
            )
        self.schedule = FlowSchedule(vla.flow_steps, vla.flow_noise_level)
        # the expert's last projection (features -> velocity): Flow-Noise reads its input at every
        # denoising step; LoRA (below) wraps only the language model, so this path stays valid
        self._out_proj_path = next(n for n, _ in self.model.named_modules() if n.endswith("action_out_proj"))
        width = self._prefix_width()
        self.value_head = (
            nn.Sequential(nn.Linear(width, 256), nn.Tanh(), nn.Linear(256, 1)) if cfg.value_head else None
        )
        self.noise_head = (
            FlowNoiseHead(
                self._action_out_proj().in_features, self.action_dim, tuple(vla.flow_noise_std_range)
            )
            if vla.flow_noise_method == "flow_noise"
            else None
        )
        if not vla.train_vision:
            self._vision_module().requires_grad_(False)
        if vla.lora_rank > 0:
            self._add_lora(vla.lora_rank)
        if vla.train_expert_only:
            self.vlm_module().requires_grad_(False)

    # -- building ------------------------------------------------------------------------------
    def _init_checkpoint(self, folder: Path, weights: bool) -> None:
        from policies.vla.pi.checkpoint import load_weights

        vla = self.cfg.vla
        checkpoint = read_checkpoint(folder, vla.dims or None, vla.asset_id or None)
        if checkpoint.action_dim != self.action_dim or checkpoint.state_dim != self.spec.state_dim:
            raise CheckpointError(
                f"policy.vla.checkpoint={str(folder)!r}: its norm stats are for state {checkpoint.state_dim} / "
                f"action {checkpoint.action_dim} dims; the env has {self.spec.state_dim} / {self.action_dim}"
            )
        self.checkpoint, self.dims, self.slots = checkpoint, checkpoint.dims, checkpoint.cameras
        self.layout = checkpoint.layout
        self.tokenizer = load_tokenizer(checkpoint, vla.tokenizer or None)
        self.token_length = checkpoint.token_length
        self.model = build_flow_model(self.dims)
        dtype = torch.bfloat16 if vla.dtype == "bfloat16" else torch.float32
        if weights:
            load_weights(self.model, checkpoint, dtype, "cpu")
        else:
            _random_init(self.model)  # a saved policy's weights come next
        self.state_norm = None

    def _prefix_width(self) -> int:
        return self.dims.vlm.width

    def _vision_module(self) -> nn.Module:
        return self.model.vlm.vision_tower

    def vlm_module(self) -> nn.Module:
        """The PaliGemma (vision tower, projector, language model): what reads the prefix."""
        return self.model.vlm

    def _init_tiny(self, backbone: str) -> None:
        from policies.vla.tiny import word_tokenizer

        family = TINY_FAMILIES[backbone]
        self.checkpoint, self.slots, self.layout = None, tuple(self.cfg.cameras), "lerobot"
        self.tokenizer = word_tokenizer(0)
        self.dims = PiDims(
            family=family, vlm=TINY_GEMMA, expert=TINY_EXPERT, vision=TINY_SIGLIP, projection_dim=TINY_GEMMA.width,
            vocab_size=len(self.tokenizer), chunk_size=self.cfg.chunk_size,
            # the published 32, or wider where the env's state / action is (a tiny model is ours to size)
            max_state_dim=max(32, self.spec.state_dim), max_action_dim=max(32, self.action_dim),
        )  # fmt: skip
        self.token_length = TINY_TOKENS
        self.model = build_flow_model(self.dims)
        _random_init(self.model)
        if family == "pi05":  # the state is digits in the prompt: room for them, ordered embeddings
            self.token_length = max(TINY_TOKENS, TINY_PI05_PROMPT_TOKENS + self.dims.max_state_dim)
            _order_number_embeddings(self.model.vlm.get_input_embeddings(), self.tokenizer)
        self.state_norm = RunningNormalizer(self.spec.state_dim)

    def _add_lora(self, rank: int) -> None:
        """LoRA on the Gemma projections of the PaliGemma and the expert (peft); the rest frozen
        but the action projections, which stay trainable."""
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=LORA_TARGETS)
        vlm = self.model.vlm
        vlm.language_model = get_peft_model(vlm.language_model, config)
        vlm.vision_tower.requires_grad_(False)
        vlm.multi_modal_projector.requires_grad_(False)
        from peft import inject_adapter_in_model

        expert = self.expert_module()
        inject_adapter_in_model(config, expert)
        for name, param in expert.named_parameters():
            param.requires_grad_("lora_" in name)

    def expert_module(self) -> nn.Module:
        return self.model.pi0.model.dit if self.dims.family == "pi0" else self.model.expert

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- observations -> model inputs ------------------------------------------------------------
    def _normalized_state(self, state: torch.Tensor) -> torch.Tensor:
        if self.checkpoint is not None:
            return self.checkpoint.state_norm.normalize(state)
        return self.state_norm(state) if self.cfg.normalize_state else state

    def _prefix(self, obs: dict[str, Any]) -> tuple[PrefixCache, torch.Tensor]:
        obs = to_tensors(obs, self.device)
        state = obs["state"].float()
        batch = state.shape[0]
        size = self.dims.vision.image_size
        dtype = next(self.model.parameters()).dtype
        pixels, present = [], []
        for slot_index in range(len(self.slots)):
            if slot_index < len(self.cfg.cameras):
                pixels.append(siglip_pixels(obs["images"][self.cfg.cameras[slot_index]], size))
                present.append(torch.ones(batch, dtype=torch.bool, device=self.device))
            elif self.layout == "openpi":
                pixels.append(torch.full((batch, 3, size, size), -1.0, device=self.device))
                present.append(torch.zeros(batch, dtype=torch.bool, device=self.device))
        normalized = self._normalized_state(state)
        tasks = list(obs.get("instruction") or []) or [self.spec.instruction] * batch
        if self.dims.family == "pi05":
            digits = normalized if self.checkpoint is not None else normalized / TINY_PI05_STATE_SIGMAS
            prompts = [
                pi05_prompt(t, row) for t, row in zip(tasks, digits.detach().cpu().numpy(), strict=True)
            ]
        else:
            prompts = [pi0_prompt(t, self.layout) for t in tasks]
        tokens, token_mask = tokenize(self.tokenizer, prompts, self.token_length)
        prefix = self.model.encode_prefix(
            torch.stack(pixels, 1).to(dtype),
            torch.stack(present, 1),
            tokens.to(self.device),
            token_mask.to(self.device),
        )
        return prefix, pad_to(normalized, self.dims.max_state_dim)

    def _state_for_expert(self, state: torch.Tensor) -> torch.Tensor | None:
        return state if self.dims.family == "pi0" else None

    def _value(self, prefix: PrefixCache) -> torch.Tensor | None:
        if self.value_head is None:
            return None
        mask = prefix.mask.float()[..., None]
        pooled = (prefix.hidden.float() * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        if self.cfg.vla.detach_value_head:
            pooled = pooled.detach()
        return self.value_head(pooled).squeeze(-1)

    def _velocity(
        self, prefix: PrefixCache, state: torch.Tensor, x: torch.Tensor, t: float | torch.Tensor
    ) -> torch.Tensor:
        """The expert's velocity at ``x``; ``t`` is one time for all rows, or one per row [B]."""
        if isinstance(t, torch.Tensor):
            times = t.to(device=x.device, dtype=torch.float32)
        else:
            times = torch.full((x.shape[0],), t, dtype=torch.float32, device=x.device)
        dtype = next(self.model.parameters()).dtype
        return self.model.velocity(prefix, self._state_for_expert(state), x.to(dtype), times).float()

    def _action_out_proj(self) -> nn.Linear:
        """The expert's last projection (features -> velocity), in every family's model."""
        return self.model.get_submodule(self._out_proj_path)

    def _velocity_and_features(
        self, prefix: PrefixCache, state: torch.Tensor, x: torch.Tensor, t: float | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_velocity` and the expert's output features it was projected from [B, chunk, width]."""
        seen: list[torch.Tensor] = []
        hook = self._action_out_proj().register_forward_pre_hook(lambda _, inputs: seen.append(inputs[0]))
        try:
            velocity = self._velocity(prefix, state, x, t)
        finally:
            hook.remove()
        return velocity, seen[-1][:, -self.chunk_size :]

    def _rollout_step(
        self, prefix: PrefixCache, state: torch.Tensor, x: torch.Tensor, t: float | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, float | torch.Tensor]:
        """A rollout's denoising step from ``x`` at ``t`` (one time, or one per row [B]): the Euler
        step, and the Gaussian the rollout draws from: its mean and std (a float, per row [B], or per
        chunk step and env action dim [B, chunk, action_dim] for Flow-Noise)."""
        if self.noise_head is not None:
            velocity, features = self._velocity_and_features(prefix, state, x, t)
            euler = x - self.schedule.dt * velocity
            return euler, euler, self.noise_head(features)
        velocity = self._velocity(prefix, state, x, t)
        euler = x - self.schedule.dt * velocity
        if isinstance(t, torch.Tensor):
            mean, std = self.schedule.sde_step_rows(x, velocity, t)
            return euler, mean, std
        mean, std = self.schedule.step(x, velocity, t, stochastic=True)
        return euler, mean, std

    def _draw(self, mean: torch.Tensor, std: float | torch.Tensor) -> torch.Tensor:
        """mean + std N(0, I) in the env's action dims; the padding follows its mean."""
        drawn = mean.clone()
        dims = self.action_dim
        if isinstance(std, torch.Tensor) and std.dim() == 1:
            std = std.view(-1, 1, 1)
        drawn[..., :dims] = mean[..., :dims] + std * torch.randn_like(mean[..., :dims])
        return drawn

    # -- the interface -------------------------------------------------------------------------
    def env_actions(self, chunk_end: torch.Tensor) -> torch.Tensor:
        """The chain's end [B, chunk, max_action_dim] -> env actions [B, chunk, action_dim]."""
        real = chunk_end[..., : self.action_dim]
        if self.checkpoint is None:
            return self.to_env_units(real.clamp(-1.0, 1.0))
        actions = self.checkpoint.action_norm.unnormalize(real)
        low = torch.as_tensor(self.spec.action.low_array(), device=actions.device, dtype=actions.dtype)
        high = torch.as_tensor(self.spec.action.high_array(), device=actions.device, dtype=actions.dtype)
        return torch.maximum(torch.minimum(actions, high), low)

    @torch.no_grad()
    def act(self, obs: dict[str, Any], mode: str = "sample") -> PolicyOutput:
        if mode not in ("sample", "greedy"):
            raise ValueError(f"mode must be 'sample' or 'greedy', got {mode!r}")
        prefix, state = self._prefix(obs)
        batch, greedy = state.shape[0], mode == "greedy"
        shape = (batch, self.chunk_size, self.dims.max_action_dim)
        # greedy starts the chain at the noise's mean; a rollout from N(0, T^2 I) (a flow's temperature, as
        # Glow's): x0 is not in the chunk's log-prob, so T < 1 leaves more of the exploration to the SDE's steps
        temperature = self.cfg.vla.sampling_temperature
        x = (
            torch.zeros(shape, device=self.device)
            if greedy
            else temperature * torch.randn(shape, device=self.device)
        )
        if not greedy and self.cfg.vla.flow_sde_steps == "one":
            return self._act_one_sde_step(prefix, state, x)
        # the log-prob's terms: one per chunk step and env action dim, summed over the denoising steps
        chain, terms = [x], torch.zeros(batch, self.chunk_size * self.action_dim, device=self.device)
        for t in self.schedule.times():
            if greedy:
                x, _ = self.schedule.step(x, self._velocity(prefix, state, x, t), t, stochastic=False)
            else:
                _, mean, std = self._rollout_step(prefix, state, x, t)
                if _is_point_mass(std):
                    x = mean
                else:
                    x = self._draw(mean, std)
                    terms = terms + gaussian_log_prob_terms(
                        x[..., : self.action_dim], mean[..., : self.action_dim], std
                    )
            chain.append(x)
        chain = torch.stack(chain, 1)
        return PolicyOutput(self.env_actions(chain[:, -1]), chain, terms.sum(-1), self._value(prefix), terms)

    def _act_one_sde_step(self, prefix, state: torch.Tensor, x: torch.Tensor) -> PolicyOutput:
        """Euler steps but one, drawn per chunk, that is the SDE's (or Flow-Noise's); the chunk's
        log-prob is that step's. ``samples`` is the chain with one row after it holding the noisy
        step's index."""
        batch, steps = x.shape[0], self.schedule.steps
        noisy_step = torch.randint(0, steps, (batch,), device=self.device)
        chain, terms = [x], torch.zeros(batch, self.chunk_size * self.action_dim, device=self.device)
        for k, t in enumerate(self.schedule.times()):
            euler, mean, std = self._rollout_step(prefix, state, x, t)
            here = noisy_step == k
            if not _is_point_mass(std) and bool(here.any()):
                x = torch.where(here.view(-1, 1, 1), self._draw(mean, std), euler)
                step_terms = gaussian_log_prob_terms(
                    x[..., : self.action_dim], mean[..., : self.action_dim], std
                )
                terms = terms + step_terms * here.unsqueeze(1)
            else:
                x = euler
            chain.append(x)
        which = noisy_step.float().view(batch, 1, 1, 1).expand(batch, 1, *x.shape[1:])
        samples = torch.cat([torch.stack(chain, 1), which], 1)
        return PolicyOutput(self.env_actions(x), samples, terms.sum(-1), self._value(prefix), terms)

    def evaluate(self, obs: dict[str, Any], samples: torch.Tensor) -> PolicyEvaluation:
        prefix, state = self._prefix(obs)
        if self.cfg.vla.flow_sde_steps == "one":
            return self._evaluate_one_sde_step(prefix, state, samples.to(self.device).float())
        chain = samples.to(self.device).float()
        batch, dims = chain.shape[0], self.action_dim
        terms = torch.zeros(batch, self.chunk_size * dims, device=self.device)
        entropy = torch.zeros(batch, device=self.device)
        for k, t in enumerate(self.schedule.times()):
            _, mean, std = self._rollout_step(prefix, state, chain[:, k], t)
            if not _is_point_mass(std):
                terms = terms + gaussian_log_prob_terms(chain[:, k + 1, ..., :dims], mean[..., :dims], std)
                entropy = entropy + gaussian_entropy(std, (batch, self.chunk_size, dims), self.device)
        return PolicyEvaluation(terms.sum(-1), entropy, self._value(prefix), terms)

    def _evaluate_one_sde_step(self, prefix, state: torch.Tensor, samples: torch.Tensor) -> PolicyEvaluation:
        """Re-scores each chunk's noisy step alone: one expert pass per chunk, at that step's x and t."""
        steps = self.schedule.steps
        if samples.shape[1] != steps + 2:
            raise ValueError(
                f"flow_sde_steps=one: samples must hold the chain ({steps + 1} rows) and the SDE step's index "
                f"(1 row), got {samples.shape[1]} rows; were they sampled with flow_sde_steps=all?"
            )
        batch, dims = samples.shape[0], self.action_dim
        if self.noise_head is None and self.schedule.noise_level == 0.0:  # all Euler's: no log-prob to credit
            zeros = torch.zeros(batch, self.chunk_size * dims, device=self.device)
            return PolicyEvaluation(zeros.sum(-1), zeros.sum(-1), self._value(prefix), zeros)
        rows = torch.arange(batch, device=self.device)
        noisy_step = samples[:, -1, 0, 0].round().long()
        times = torch.tensor(self.schedule.times(), device=self.device)[noisy_step]
        x, x_next = samples[rows, noisy_step], samples[rows, noisy_step + 1]
        _, mean, std = self._rollout_step(prefix, state, x, times)
        terms = gaussian_log_prob_terms(x_next[..., :dims], mean[..., :dims], std)
        entropy = gaussian_entropy(std, (batch, self.chunk_size, dims), self.device)
        return PolicyEvaluation(terms.sum(-1), entropy, self._value(prefix), terms)

    def value(self, obs: dict[str, Any]) -> torch.Tensor:
        if self.value_head is None:
            raise ValueError("this policy has no value head (policy.value_head=false)")
        return self._value(self._prefix(obs)[0])

    def imitation_loss(
        self, obs: dict[str, Any], unit_targets: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """Upstream's flow-matching loss at t ~ Beta(1.5, 1) * 0.999 + 0.001, over the env's action dims."""
        prefix, state = self._prefix(obs)
        targets = unit_targets.to(self.device).float()
        if self.checkpoint is not None:
            targets = self.checkpoint.action_norm.normalize(self.to_env_units(targets))
        targets = pad_to(targets, self.dims.max_action_dim)
        batch = targets.shape[0]
        t = torch.distributions.Beta(1.5, 1.0).sample((batch,)).to(self.device) * 0.999 + 0.001
        noise = torch.randn_like(targets)
        noisy = t[:, None, None] * noise + (1 - t[:, None, None]) * targets
        dtype = next(self.model.parameters()).dtype
        v = self.model.velocity(prefix, self._state_for_expert(state), noisy.to(dtype), t).float()
        errors = (v - (noise - targets))[..., : self.action_dim].pow(2).mean(-1)
        valid = valid.to(self.device).float()
        return (errors * valid).sum() / valid.sum().clamp(min=1.0)

    @property
    def cameras(self) -> list[str]:
        return list(self.cfg.cameras)

    @property
    def has_value_head(self) -> bool:
        return self.value_head is not None

    def update_normalizers(self, obs: dict[str, Any]) -> None:
        if self.state_norm is not None and self.cfg.normalize_state:
            self.state_norm.update(to_tensors(obs, self.device)["state"])

    def config_dict(self) -> dict[str, Any]:
        return asdict(self.cfg)
