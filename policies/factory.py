"""Build and load policies by config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from policies.actor_critic import GaussianActorCritic
from policies.base import POLICY_FILE, RL_HEAD_PREFIXES, WEIGHTS_FILE, Policy
from policies.config import PolicyConfig
from policies.errors import PolicyLoadError
from protos import EnvSpec


def make_policy(spec: EnvSpec, cfg: PolicyConfig | dict[str, Any], saved: str | Path | None = None) -> Policy:
    """The policy a config describes: ``policy.kind`` mlp / cnn (Gaussian actor-critic) or vla.

    ``saved`` is a saved policy's folder: a VLA then rebuilds its model from the files there, not
    from the backbone it was first made from."""
    if isinstance(cfg, dict):
        cfg = PolicyConfig.from_dict(cfg)
    if cfg.kind == "vla":
        # transformers only where a VLA is asked for
        from policies.vla.openvla.policy import OpenVLAPolicy, is_openvla_config
        from policies.vla.pi.policy import PiPolicy
        from policies.vla.smolvla.policy import SmolVLAPolicy, is_smolvla_config

        if is_openvla_config(cfg):
            cls: type[Policy] = OpenVLAPolicy
        elif is_smolvla_config(cfg):
            cls = SmolVLAPolicy
        else:  # π0 / π0.5, or a folder of no known layout (PiPolicy's loader names the layouts it knows)
            cls = PiPolicy
        policy: Policy = cls(spec, cfg, saved=None if saved is None else Path(saved))
    else:
        policy = GaussianActorCritic(spec, cfg)
    if cfg.init_from and saved is None:
        policy.load_weights(_weights_for(policy, cfg, Path(cfg.init_from)))
        policy.freeze_normalizers()  # the started weights were fit to the saved statistics
    return policy


def with_own_rl_heads(policy: Policy, weights: dict[str, Any]) -> dict[str, Any]:
    """An SFT start may lack the heads RL adds (PPO's value head, Flow-Noise's std head: they start
    fresh) or have one the RL policy drops (GRPO has no value head)."""
    own = policy.state_dict()
    kept = {k: v for k, v in weights.items() if k in own or not k.startswith(RL_HEAD_PREFIXES)}
    kept.update({k: v for k, v in own.items() if k not in kept and k.startswith(RL_HEAD_PREFIXES)})
    return kept


def _read_header(path: Path) -> dict[str, Any]:
    header_file = path / POLICY_FILE
    if not header_file.is_file():
        raise PolicyLoadError(
            f"{path} is not a saved policy (no {POLICY_FILE}; expected Policy.save's folder)"
        )
    return json.loads(header_file.read_text())


def _weights_for(policy: Policy, cfg: PolicyConfig, path: Path) -> dict[str, Any]:
    """The weights of the saved policy at ``path``, after checking it is the same kind of policy."""
    from safetensors.torch import load_file

    header = _read_header(path)
    where = f"policy.init_from={str(path)!r}"
    if header["class"] != type(policy).__name__:
        raise PolicyLoadError(
            f"{where} holds a {header['class']}; this config builds a {type(policy).__name__}"
        )
    saved = PolicyConfig.from_dict(header["config"])
    if cfg.kind == "vla":
        for key in ("backbone", "parallel_decoding", "lora_rank"):
            if getattr(saved.vla, key) != getattr(cfg.vla, key):
                raise PolicyLoadError(
                    f"{where} has policy.vla.{key}={getattr(saved.vla, key)!r}; this config asks for "
                    f"{getattr(cfg.vla, key)!r}"
                )
    if saved.chunk_size != cfg.chunk_size:
        raise PolicyLoadError(
            f"{where} has policy.chunk_size={saved.chunk_size}; this config asks for {cfg.chunk_size}"
        )
    return with_own_rl_heads(policy, load_file(str(path / WEIGHTS_FILE)))


def load_policy(path: str | Path, map_location: str = "cpu") -> Policy:
    """Load a policy saved with ``Policy.save`` (a folder), or a ``.pt`` file of older versions."""
    path = Path(path)
    if path.is_file():
        return _load_legacy(path, map_location)
    header = _read_header(path)
    policy = make_policy(EnvSpec.from_dict(header["spec"]), header["config"], saved=path)
    if type(policy).__name__ != header["class"]:
        raise PolicyLoadError(
            f"{path} holds a {header['class']}, its config builds a {type(policy).__name__}"
        )
    from safetensors.torch import load_file

    policy.load_weights(load_file(str(path / WEIGHTS_FILE), device=map_location))
    return policy


def _load_legacy(path: Path, map_location: str) -> Policy:
    import torch

    payload = torch.load(path, map_location=map_location, weights_only=True)
    policy = make_policy(EnvSpec.from_dict(payload["spec"]), payload["config"])
    policy.load_weights(payload["state_dict"])
    return policy
