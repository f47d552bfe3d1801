"""How many bytes of arrays an object carries: what a ``ray.get`` on the driver moves through the
driver process (``train/driver_bytes``), and what a rollout's trajectory weighs
(``train/trajectory_bytes``). Arrays and tensors count their buffers; containers, dataclasses and
plain objects count what they hold; numbers and text count nothing."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

MAX_DEPTH = 8


def payload_bytes(value: Any, depth: int = 0) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, torch.Tensor):
        return int(value.element_size() * value.nelement())
    if depth >= MAX_DEPTH or isinstance(value, str | bytes | int | float | bool | type(None)):
        return len(value) if isinstance(value, bytes) else 0
    if isinstance(value, dict):
        return sum(payload_bytes(v, depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(payload_bytes(v, depth + 1) for v in value)
    if dataclasses.is_dataclass(value):
        return sum(payload_bytes(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    if hasattr(value, "__dict__"):
        return sum(payload_bytes(v, depth + 1) for v in vars(value).values())
    return 0


class DriverLedger:
    """Bytes the driver fetched (``get``) since the last ``take``."""

    def __init__(self) -> None:
        self.bytes = 0

    def get(self, refs):
        import ray

        value = ray.get(refs)
        self.bytes += payload_bytes(value)
        return value

    def take(self) -> int:
        taken, self.bytes = self.bytes, 0
        return taken
