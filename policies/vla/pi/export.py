"""Handing a finetuned π0 / π0.5 / SmolVLA back in the layout it came in (openpi or LeRobot).

The weights go under the source folder's own names and key set (LoRA merged into the base
weights; openpi's tied embedding stored once as its ``lm_head``; keys upstream stores but nothing
reads carried over unchanged); every other file of the source folder (``config.json``, openpi's
``assets/``, LeRobot's processor files) is copied as it is. A ``tiny:`` policy has no layout to go
back to and is refused.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from policies.vla.pi.policy import PiPolicy
from policies.vla.weights import CheckpointError

TIED_EMBEDDING = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
TIED_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"


def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights with every LoRA adapter merged in, under the names it had before peft."""
    from peft.tuners.lora import LoraLayer

    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    for layer in layers:
        layer.merge()
    try:
        out = {}
        for name, tensor in model.state_dict().items():
            if "lora_" in name:
                continue
            name = name.replace("base_model.model.", "").replace(".base_layer.", ".")
            out[name] = tensor.detach().cpu().contiguous().clone()
        return out
    finally:
        for layer in layers:
            layer.unmerge()


def _upstream_names(policy: PiPolicy, ours: dict[str, torch.Tensor]) -> dict[str, str]:
    """Ours (before peft) -> the source's names without LeRobot's ``model.`` prefix."""
    if hasattr(policy.model, "state_dict_names"):
        from policies.vla.pi.models import build_flow_model

        return build_flow_model(policy.dims).state_dict_names()
    return {name: name for name in ours}  # SmolVLA: LeRobot's names already


def export_pi(policy: PiPolicy, folder: str | Path) -> Path:
    from safetensors import safe_open
    from safetensors.torch import save_file

    if policy.checkpoint is None:
        raise CheckpointError(
            "a tiny: policy has no upstream layout to export to (load one from a checkpoint)"
        )
    source = policy.checkpoint.folder
    folder = Path(folder)
    if folder.resolve() == source.resolve():
        raise CheckpointError(f"{folder}: is the source checkpoint; export to another folder")
    ours = merged_state_dict(policy.model)
    theirs = {
        upstream: ours[name] for name, upstream in _upstream_names(policy, ours).items() if name in ours
    }
    layout = getattr(policy.checkpoint, "layout", "lerobot")
    prefix = "model." if layout == "lerobot" else ""
    tensors, unused = {}, []
    with safe_open(str(source / "model.safetensors"), "pt") as f:
        for stored in f.keys():  # noqa: SIM118 (a safetensors handle)
            name = stored.removeprefix(prefix)
            if name in theirs:
                tensors[stored] = theirs[name]
            elif name == TIED_HEAD and TIED_EMBEDDING in theirs:
                tensors[stored] = theirs[TIED_EMBEDDING].clone()  # tied: the head is the embedding
            else:
                tensors[stored] = f.get_tensor(stored)  # stored by upstream, read by nothing
                unused.append(name)
    if len(unused) > 2:  # more than the unused heads: names went astray, which must not pass silently
        raise CheckpointError(
            f"{source}: {len(unused)} of its tensors have no counterpart in the policy ({unused[0]}, ...)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.name == "model.safetensors":
            continue
        target = folder / path.name
        if path.is_dir():
            shutil.copytree(path, target, dirs_exist_ok=True)
        else:
            shutil.copy2(path, target)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder
