"""Gaussian actor-critic policies over state (MLP) or images + state (CNN), with chunked actions.

Two action heads:
  * ``gaussian``: state-independent log-std, samples clipped into the bounds (PPO, GRPO);
  * ``tanh_gaussian``: state-dependent log-std, squashed by tanh with the log-det correction (SAC).
Actions live in [-1, 1] inside the network and are mapped affinely onto the spec's bounds.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributions import Normal

from policies.base import Policy, PolicyEvaluation, PolicyOutput, to_tensors
from policies.config import PolicyConfig
from policies.encoders import ImageEncoder, mlp
from policies.normalization import RunningNormalizer
from protos import EnvSpec

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


class ObservationEncoder(nn.Module):
    """Normalised state (unless ``use_state`` is off), plus one CNN feature vector per listed camera,
    concatenated."""

    def __init__(
        self,
        spec: EnvSpec,
        cameras: list[str],
        cnn_channels: list[int],
        cnn_features: int,
        normalize_state: bool = True,
        use_state: bool = True,
    ) -> None:
        super().__init__()
        self.normalize, self.use_state = normalize_state, use_state
        self.state_norm = RunningNormalizer(spec.state_dim)
        self.cameras = list(cameras)
        for name in self.cameras:
            if name not in spec.camera_names:
                raise ValueError(f"camera {name!r} is not in the env's cameras {list(spec.camera_names)}")
        self.image_encoders = nn.ModuleDict(
            {
                name: ImageEncoder(tuple(cnn_channels), cnn_features, spec.camera(name).shape[:2])
                for name in self.cameras
            }
        )
        self.out_dim = (spec.state_dim if use_state else 0) + cnn_features * len(self.cameras)

    @classmethod
    def for_policy(cls, spec: EnvSpec, cfg: PolicyConfig) -> ObservationEncoder:
        cameras = list(cfg.cameras) if cfg.kind == "cnn" else []
        return cls(spec, cameras, cfg.cnn_channels, cfg.cnn_features, cfg.normalize_state)

    def forward(self, obs: dict[str, Any]) -> torch.Tensor:
        features = []
        if self.use_state:
            state = obs["state"]
            features.append(self.state_norm(state) if self.normalize else state)
        features += [self.image_encoders[name](obs["images"][name]) for name in self.cameras]
        return torch.cat(features, dim=-1)


class GaussianActorCritic(Policy):
    """Actor (+ optional value head) with a Gaussian or tanh-Gaussian action chunk head."""

    def __init__(self, spec: EnvSpec, cfg: PolicyConfig) -> None:
        super().__init__()
        self.spec, self.cfg = spec, cfg
        self.chunk_size = cfg.chunk_size
        self.action_dim = spec.action.dim
        out = cfg.chunk_size * self.action_dim
        act = ACTIVATIONS[cfg.activation]
        self.encoder = ObservationEncoder.for_policy(spec, cfg)
        self.actor = mlp([self.encoder.out_dim, *cfg.hidden_sizes], act)
        self.actor_act = act()
        self.mean_head = nn.Linear(cfg.hidden_sizes[-1], out)
        if cfg.head == "gaussian":
            self.log_std = nn.Parameter(torch.full((out,), cfg.init_log_std))
        else:
            self.log_std_head = nn.Linear(cfg.hidden_sizes[-1], out)
        self.critic = mlp([self.encoder.out_dim, *cfg.hidden_sizes, 1], act) if cfg.value_head else None
        self.register_buffer("action_low", torch.as_tensor(spec.action.low_array()))
        self.register_buffer("action_high", torch.as_tensor(spec.action.high_array()))
        nn.init.orthogonal_(self.mean_head.weight, gain=0.01)
        nn.init.zeros_(self.mean_head.bias)

    # -- pieces ----------------------------------------------------------------------------------
    def config_dict(self) -> dict[str, Any]:
        return asdict(self.cfg)

    def _as_tensors(self, obs: dict[str, Any]) -> dict[str, Any]:
        """Observations on this policy's device (numpy from envs, CPU tensors from batches)."""
        return to_tensors(obs, self.action_low.device)

    def distribution(self, features: torch.Tensor) -> Normal:
        hidden = self.actor_act(self.actor(features))
        mean = self.mean_head(hidden)
        if self.cfg.head == "gaussian":
            log_std = self.log_std.expand_as(mean)
        else:
            log_std = torch.clamp(self.log_std_head(hidden), LOG_STD_MIN, LOG_STD_MAX)
        return Normal(mean, log_std.exp())

    def to_env_units(self, unit_actions: torch.Tensor) -> torch.Tensor:
        """[-1, 1] -> the spec's bounds, on this policy's device."""
        unit_actions = unit_actions.to(self.action_low.device)
        return self.action_low + (unit_actions + 1.0) * 0.5 * (self.action_high - self.action_low)

    def squash(self, samples: torch.Tensor) -> torch.Tensor:
        return torch.clamp(samples, -1.0, 1.0) if self.cfg.head == "gaussian" else torch.tanh(samples)

    def log_prob_terms(self, dist: Normal, samples: torch.Tensor) -> torch.Tensor:
        """Per action dimension (with the tanh correction): [B, chunk * action_dim]."""
        logp = dist.log_prob(samples)
        if self.cfg.head == "tanh_gaussian":
            logp = logp - 2.0 * (np.log(2.0) - samples - nn.functional.softplus(-2.0 * samples))
        return logp

    def log_prob(self, dist: Normal, samples: torch.Tensor) -> torch.Tensor:
        return self.log_prob_terms(dist, samples).sum(-1)

    def value(self, obs: dict[str, Any]) -> torch.Tensor:
        if self.critic is None:
            raise ValueError("this policy has no value head (policy.value_head=false)")
        return self.critic(self.encoder(self._as_tensors(obs))).squeeze(-1)

    def _chunked(self, flat: torch.Tensor) -> torch.Tensor:
        return flat.reshape(flat.shape[0], self.chunk_size, self.action_dim)

    # -- the interface -----------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: dict[str, Any], mode: str = "sample") -> PolicyOutput:
        if mode not in ("sample", "greedy"):
            raise ValueError(f"mode must be 'sample' or 'greedy', got {mode!r}")
        obs = self._as_tensors(obs)
        features = self.encoder(obs)
        dist = self.distribution(features)
        samples = dist.sample() if mode == "sample" else dist.mean
        value = self.critic(features).squeeze(-1) if self.critic is not None else None
        terms = self.log_prob_terms(dist, samples)
        return PolicyOutput(
            actions=self.to_env_units(self._chunked(self.squash(samples))),
            samples=self._chunked(samples),
            log_prob=terms.sum(-1),
            value=value,
            log_prob_terms=terms,
        )

    def evaluate(self, obs: dict[str, Any], samples: torch.Tensor) -> PolicyEvaluation:
        obs = self._as_tensors(obs)
        features = self.encoder(obs)
        dist = self.distribution(features)
        flat = samples.reshape(samples.shape[0], -1).to(features.device)
        value = self.critic(features).squeeze(-1) if self.critic is not None else None
        terms = self.log_prob_terms(dist, flat)
        return PolicyEvaluation(terms.sum(-1), dist.entropy().sum(-1), value, terms)

    def rsample(
        self, obs: dict[str, Any], features: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised sample in [-1, 1] with its log-prob, for SAC-style actor losses."""
        if features is None:
            features = self.encoder(self._as_tensors(obs))
        dist = self.distribution(features)
        samples = dist.rsample()
        return self.squash(samples), self.log_prob(dist, samples)

    def update_normalizers(self, obs: dict[str, Any]) -> None:
        if self.cfg.normalize_state:
            self.encoder.state_norm.update(self._as_tensors(obs)["state"])

    # -- what the algorithms use beyond act/evaluate ------------------------------------------------
    @property
    def cameras(self) -> list[str]:
        return list(self.encoder.cameras)

    @property
    def has_value_head(self) -> bool:
        return self.critic is not None

    @property
    def reparameterized(self) -> bool:  # type: ignore[override]
        return self.cfg.head == "tanh_gaussian"

    @property
    def feature_encoder(self) -> ObservationEncoder:
        return self.encoder

    def actor_parameters(self) -> list[nn.Parameter]:
        """Everything but the encoder (SAC trains the encoder through the critic)."""
        return [p for n, p in self.named_parameters() if not n.startswith("encoder.")]

    def imitation_loss(
        self, obs: dict[str, Any], unit_targets: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """Squared error of the squashed mean chunk against the targets, over the valid steps."""
        predicted = self.squash(self.distribution(self.encoder(self._as_tensors(obs))).mean)
        errors = (predicted.reshape(unit_targets.shape) - unit_targets).pow(2).mean(-1)
        return (errors * valid).sum() / valid.sum().clamp(min=1.0)
