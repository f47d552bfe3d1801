"""Build and load policies by config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from policies.actor_critic import GaussianActorCritic
from policies.base import Policy
from policies.config import PolicyConfig
from protos import EnvSpec


def make_policy(spec: EnvSpec, cfg: PolicyConfig | dict[str, Any]) -> Policy:
    if isinstance(cfg, dict):
        cfg = PolicyConfig(**cfg)
    return GaussianActorCritic(spec, cfg)


def load_policy(path: str | Path, map_location: str = "cpu") -> Policy:
    """Load a policy saved with ``Policy.save``: its config, env spec and weights."""
    payload = torch.load(Path(path), map_location=map_location, weights_only=False)
    policy = make_policy(EnvSpec.from_dict(payload["spec"]), payload["config"])
    policy.load_weights(payload["state_dict"])
    return policy
