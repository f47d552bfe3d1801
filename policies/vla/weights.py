"""What every published-checkpoint loader shares: a model built without allocating its weights (so a
checkpoint lands in its dtype directly) and the one-line error for an unusable folder."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch import nn


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


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be used, said in one line."""


def read_json(path: Path) -> dict[str, Any]:
    """A checkpoint's JSON file, or a one-line :class:`CheckpointError`."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read it as JSON ({exc})") from None
