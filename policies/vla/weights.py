"""What every published-checkpoint loader shares: a model built without allocating its weights (so a
checkpoint lands in its dtype directly) and the one-line error for an unusable folder."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from protos.user_error import UserError


@contextlib.contextmanager
def empty_parameters() -> Iterator[None]:
    """Modules built inside get their parameters on the meta device (buffers stay real).

    Fill them with ``load_state_dict(tensors, assign=True)``: there is never a float32 copy of the
    whole model next to the checkpoint's tensors."""
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None:
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


class CheckpointError(UserError, ValueError):
    """A checkpoint folder that cannot be used, said in one line."""


def read_json(path: Path) -> dict[str, Any]:
    """A checkpoint's JSON file, or a one-line :class:`CheckpointError`."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read it as JSON ({exc})") from None


def load_key_for_key(
    model: nn.Module,
    files: list[Path],
    dtype: torch.dtype,
    device: str | torch.device,
    prefix: str = "",
    shape_hint: str = "",
    given: dict[str, torch.Tensor] | None = None,
) -> None:
    """Fill ``model`` (parameters on meta) from safetensors ``files`` whose keys are the model's own
    (after ``prefix``), each tensor read once in ``dtype``; an unexpected, missing or misshapen key is
    a one-line :class:`CheckpointError` (``shape_hint`` says what to do about a shape). ``given``:
    tensors under the model's names that stand in for the files' (their copies there are skipped)."""
    from safetensors import safe_open

    folder = files[0].parent
    ours = model.state_dict(keep_vars=True)
    tensors: dict[str, torch.Tensor] = {
        name: tensor.to(device, dtype if tensor.is_floating_point() else tensor.dtype)
        for name, tensor in (given or {}).items()
    }
    for path in files:
        with safe_open(str(path), "pt", device=str(device)) as f:
            for stored in f.keys():  # noqa: SIM118 (a safetensors handle)
                name = stored.removeprefix(prefix)
                if name in tensors:
                    continue
                if name not in ours:
                    raise CheckpointError(f"{folder}: unexpected key {stored} in {path.name}")
                tensor = f.get_tensor(stored)
                if tuple(tensor.shape) != tuple(ours[name].shape):
                    raise CheckpointError(
                        f"{folder}: {stored} has shape {list(tensor.shape)}, the model built from its config "
                        f"wants {list(ours[name].shape)}{shape_hint}"
                    )
                tensors[name] = tensor.to(dtype) if tensor.is_floating_point() else tensor
    missing = sorted(set(ours) - set(tensors))
    if missing:
        raise CheckpointError(f"{folder}: missing {prefix}{missing[0]} ({len(missing)} in all)")
    model.load_state_dict(tensors, strict=True, assign=True)
    model.to(device)
