"""Reading a π checkpoint folder as upstream writes it, nothing downloaded.

Two layouts:
- **openpi** (PyTorch): ``model.safetensors`` with openpi's names (the tied embedding stored once,
  as ``paligemma_with_expert.paligemma.lm_head.weight``), a minimal ``config.json``
  (``action_dim``, ``action_horizon``, ``paligemma_variant``, ``action_expert_variant``) and
  ``assets/<asset_id>/norm_stats.json``; π0 and π0.5 are told apart by their keys. No tokenizer.
- **lerobot**: ``config.json`` with ``"type": "pi0" | "pi05"``, ``model.``-prefixed keys, and
  ``policy_preprocessor*.json`` / ``policy_postprocessor*.json`` naming their normaliser files.

Every checkpoint tensor lands in one model parameter or is on :data:`UNUSED_KEYS`; anything else
is a one-line :class:`CheckpointError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from policies.vla.pi.dims import PiDims, variant, with_dims_file
from policies.vla.pi.inputs import Normalization
from policies.vla.weights import CheckpointError
from policies.vla.weights import read_json as _json

LAYOUTS = ("openpi", "lerobot")
OPENPI_CAMERAS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
OPENPI_TOKEN_LENGTH = {"pi0": 48, "pi05": 200}  # openpi's `max_token_len` defaults
IMAGE_PREFIX = "observation.images."
# Stored by upstream, read by nothing at inference: the PaliGemma's language-model head (tied to
# the embedding, which we load) and, for π0.5, the action expert's unused head.
UNUSED_KEYS = {
    "pi0": (r"paligemma_with_expert\.paligemma\.lm_head\.weight",),
    "pi05": (
        r"paligemma_with_expert\.paligemma\.lm_head\.weight",
        r"paligemma_with_expert\.gemma_expert\.lm_head\.weight",
    ),
}
TIED_EMBEDDING = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
TIED_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"


@dataclass(frozen=True)
class PiCheckpoint:
    """What a π checkpoint folder says, beside its weights."""

    folder: Path
    layout: str
    dims: PiDims
    cameras: tuple[str, ...]  # the camera slots, in prompt order
    state_dim: int
    action_dim: int
    token_length: int
    state_norm: Normalization
    action_norm: Normalization
    tokenizer_name: str | None  # what the checkpoint names (a hub id or a local folder), if anything

    @property
    def family(self) -> str:
        return self.dims.family


def _weight_names(path: Path) -> list[str]:
    from safetensors import safe_open

    if not path.is_file():
        raise CheckpointError(f"{path.parent}: no model.safetensors")
    with safe_open(str(path), "pt") as f:
        return list(f.keys())


def detect_layout(folder: Path) -> str:
    config = folder / "config.json"
    if not config.is_file():
        raise CheckpointError(
            f"{folder}: not a checkpoint folder (no config.json); known layouts: {list(LAYOUTS)}"
        )
    fields = _json(config)
    if "type" in fields:
        return "lerobot"
    if "paligemma_variant" in fields and "action_horizon" in fields:
        return "openpi"
    raise CheckpointError(
        f"{folder}: config.json is of no layout we know ({sorted(fields)[:6]}...); known: {list(LAYOUTS)} "
        "(lerobot: a 'type' key; openpi: 'paligemma_variant' and 'action_horizon')"
    )


def _family_of_keys(names: list[str], folder: Path) -> str:
    if any(n.endswith("time_mlp_in.weight") and "action_time" not in n for n in names):
        return "pi05"
    if any(n.endswith("state_proj.weight") for n in names):
        return "pi0"
    raise CheckpointError(f"{folder}: the weights are neither π0 (state_proj) nor π0.5 (time_mlp_in)")


def read_checkpoint(
    folder: str | Path, dims_file: str | Path | None = None, asset_id: str | None = None
) -> PiCheckpoint:
    folder = Path(folder)
    layout = detect_layout(folder)
    reader = _read_lerobot if layout == "lerobot" else _read_openpi
    checkpoint = reader(folder, asset_id)
    dims = with_dims_file(checkpoint.dims, dims_file)
    return replace(checkpoint, dims=dims)


def _read_openpi(folder: Path, asset_id: str | None) -> PiCheckpoint:
    config = _json(folder / "config.json")
    family = _family_of_keys(_weight_names(folder / "model.safetensors"), folder)
    where = f"{folder}/config.json"
    dims = PiDims(
        family=family,
        vlm=variant(config["paligemma_variant"], where),
        expert=variant(config["action_expert_variant"], where),
        chunk_size=int(config["action_horizon"]),
        max_state_dim=int(config["action_dim"]),
        max_action_dim=int(config["action_dim"]),
    )
    assets = folder / "assets"
    found = sorted(p.parent.name for p in assets.glob("*/norm_stats.json")) if assets.is_dir() else []
    if not found:
        raise CheckpointError(
            f"{folder}: no assets/<asset_id>/norm_stats.json (openpi writes the norm stats there)"
        )
    if asset_id is None and len(found) > 1:
        raise CheckpointError(
            f"{folder}: several norm stats, name one with policy.vla.asset_id; found: {found}"
        )
    asset_id = asset_id or found[0]
    if asset_id not in found:
        raise CheckpointError(f"{folder}: no norm stats for asset_id {asset_id!r}; found: {found}")
    stats = _json(assets / asset_id / "norm_stats.json").get("norm_stats", {})
    mode = "mean_std" if family == "pi0" else "quantiles"  # openpi: quantile norm for every model but π0
    norms = {}
    for key in ("state", "actions"):
        if key not in stats:
            raise CheckpointError(f"{folder}: norm_stats.json of {asset_id!r} has no {key!r}")
        tensors = {k: torch.tensor(v, dtype=torch.float32) for k, v in stats[key].items() if v is not None}
        norms[key] = Normalization(mode, tensors, style="openpi")
    return PiCheckpoint(
        folder=folder,
        layout="openpi",
        dims=dims,
        cameras=OPENPI_CAMERAS,
        state_dim=norms["state"].dim,
        action_dim=norms["actions"].dim,
        token_length=OPENPI_TOKEN_LENGTH[family],
        state_norm=norms["state"],
        action_norm=norms["actions"],
        tokenizer_name=None,
    )


def _processor_step(folder: Path, pattern: str, registry_name: str) -> dict[str, Any] | None:
    for path in sorted(folder.glob(pattern)):
        if path.suffix != ".json":
            continue
        for step in _json(path).get("steps", []):
            if step.get("registry_name") == registry_name:
                return step
    return None


def _lerobot_norm(
    folder: Path, step: dict[str, Any] | None, feature: str, kind: str, config: dict
) -> Normalization:
    mode = config.get("normalization_mapping", {}).get(kind, "IDENTITY").lower()
    if step is None or "state_file" not in step:
        raise CheckpointError(
            f"{folder}: no normaliser step in policy_preprocessor*.json / policy_postprocessor*.json"
        )
    from safetensors.torch import load_file

    path = folder / step["state_file"]
    if not path.is_file():
        raise CheckpointError(f"{folder}: the normaliser file {step['state_file']} is missing")
    tensors = load_file(str(path))
    stats = {k.removeprefix(feature + "."): v for k, v in tensors.items() if k.startswith(feature + ".")}
    try:
        return Normalization(mode, stats, style="lerobot", eps=float(step.get("config", {}).get("eps", 1e-8)))
    except ValueError as exc:
        raise CheckpointError(f"{path}: {feature}: {exc}") from None


def _read_lerobot(folder: Path, asset_id: str | None) -> PiCheckpoint:
    config = _json(folder / "config.json")
    family = config["type"]
    if family not in ("pi0", "pi05"):
        raise CheckpointError(f"{folder}: LeRobot policy type {family!r}; this loader reads 'pi0' and 'pi05'")
    names = _weight_names(folder / "model.safetensors")
    keys_family = _family_of_keys([n.removeprefix("model.") for n in names], folder)
    if keys_family != family:
        raise CheckpointError(f"{folder}: config.json says {family!r} but the weights are {keys_family!r}")
    where = f"{folder}/config.json"
    dims = PiDims(
        family=family,
        vlm=variant(config.get("paligemma_variant", "gemma_2b"), where),
        expert=variant(config.get("action_expert_variant", "gemma_300m"), where),
        chunk_size=int(config["chunk_size"]),
        max_state_dim=int(config["max_state_dim"]),
        max_action_dim=int(config["max_action_dim"]),
        num_inference_steps=int(config.get("num_inference_steps", 10)),
        min_period=float(config.get("min_period", 4e-3)),
        max_period=float(config.get("max_period", 4.0)),
    )
    features = config.get("input_features", {})
    cameras = tuple(k.removeprefix(IMAGE_PREFIX) for k, v in features.items() if v.get("type") == "VISUAL")
    state = features.get("observation.state")
    action = config.get("output_features", {}).get("action")
    if state is None or action is None:
        raise CheckpointError(
            f"{where}: needs input_features['observation.state'] and output_features['action']"
        )
    tokenizer_step = _processor_step(folder, "policy_preprocessor*.json", "tokenizer_processor") or {}
    tokenizer_config = tokenizer_step.get("config", {})
    pre = _processor_step(folder, "policy_preprocessor*.json", "normalizer_processor")
    post = _processor_step(folder, "policy_postprocessor*.json", "unnormalizer_processor")
    return PiCheckpoint(
        folder=folder,
        layout="lerobot",
        dims=dims,
        cameras=cameras,
        state_dim=int(state["shape"][0]),
        action_dim=int(action["shape"][0]),
        token_length=int(tokenizer_config.get("max_length", config.get("tokenizer_max_length", 48))),
        state_norm=_lerobot_norm(folder, pre, "observation.state", "STATE", config),
        action_norm=_lerobot_norm(folder, post, "action", "ACTION", config),
        tokenizer_name=tokenizer_config.get("tokenizer_name"),
    )


def load_weights(
    model: torch.nn.Module, checkpoint: PiCheckpoint, dtype: torch.dtype, device: str | torch.device
) -> None:
    """Fill ``model`` (parameters on meta) from the checkpoint, each tensor read once in ``dtype``."""
    from safetensors import safe_open

    prefix = "model." if checkpoint.layout == "lerobot" else ""
    path = checkpoint.folder / "model.safetensors"
    where = f"{checkpoint.folder} ({checkpoint.layout} layout, {checkpoint.family})"
    with safe_open(str(path), "pt", device=str(device)) as f:
        stored = {name.removeprefix(prefix): name for name in f.keys()}  # noqa: SIM118 (a safetensors handle)
        if TIED_EMBEDDING not in stored and TIED_HEAD in stored:
            stored[TIED_EMBEDDING] = stored[TIED_HEAD]  # openpi stores the tied pair once
        wanted = model.state_dict_names()
        ours = model.state_dict(keep_vars=True)
        tensors = {}
        for name, theirs in wanted.items():
            if theirs not in stored:
                raise CheckpointError(f"{where}: missing {prefix}{theirs}")
            tensor = f.get_tensor(stored[theirs])
            if tuple(tensor.shape) != tuple(ours[name].shape):
                raise CheckpointError(
                    f"{where}: {prefix}{theirs} has shape {list(tensor.shape)}, the model built from the "
                    f"config wants {list(ours[name].shape)} (weights of other sizes than the config's "
                    "variants? pass their dims with --dims / policy.vla.dims)"
                )
            tensors[name] = tensor.to(dtype) if tensor.is_floating_point() else tensor
    used = set(wanted.values()) | {TIED_HEAD}
    allowed = [re.compile(p) for p in UNUSED_KEYS[checkpoint.family]]
    unexpected = sorted(k for k in stored if k not in used and not any(p.fullmatch(k) for p in allowed))
    if unexpected:
        raise CheckpointError(f"{where}: unexpected key {prefix}{unexpected[0]} ({len(unexpected)} in all)")
    model.load_state_dict(tensors, strict=True, assign=True)
    model.to(device)
