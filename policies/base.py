"""The one policy interface: ``act(obs_batch, mode) -> action chunk (+ log-prob, value)``.

Every policy (MLP, CNN, later VLAs) consumes the shared batched observation layout
``{"images": {camera: uint8[B, H, W, 3]}, "state": float32[B, D], "instruction": [str] * B}`` and
returns action chunks ``[B, chunk, action_dim]`` in the env's units, within the spec's bounds.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from protos import EnvSpec
from protos.atomic_files import write_atomic


@dataclass
class PolicyOutput:
    """What ``act`` returns. ``samples`` are the raw draws that ``log_prob`` refers to."""

    actions: torch.Tensor  # [B, chunk, action_dim], env units, inside the bounds
    samples: torch.Tensor  # [B, chunk, action_dim]
    log_prob: torch.Tensor  # [B]: summed over the chunk and action dims
    value: torch.Tensor | None  # [B], when the policy has a value head

    def cpu(self) -> PolicyOutput:
        """The same output on the CPU (what a trajectory stores; no copy for CPU tensors)."""
        return PolicyOutput(
            self.actions.cpu(),
            self.samples.cpu(),
            self.log_prob.cpu(),
            None if self.value is None else self.value.cpu(),
        )


@dataclass
class PolicyEvaluation:
    """The training forward for given samples."""

    log_prob: torch.Tensor  # [B]
    entropy: torch.Tensor  # [B]
    value: torch.Tensor | None  # [B]


def to_tensors(obs: dict[str, Any], device: torch.device | str = "cpu") -> dict[str, Any]:
    """Batched observation (numpy arrays or tensors) -> tensors on ``device`` (images stay uint8;
    the encoder scales them). Tensors already there are not copied."""
    return {
        "images": {k: _as_tensor(v, device) for k, v in obs.get("images", {}).items()},
        "state": _as_tensor(obs["state"], device, torch.float32),
        "instruction": list(obs.get("instruction", [])),
    }


def _as_tensor(value: Any, device: torch.device | str, dtype: torch.dtype | None = None) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=dtype or value.dtype)
    return torch.as_tensor(np.asarray(value), dtype=dtype, device=device)


class Policy(nn.Module, abc.ABC):
    """Base class: subclasses implement ``act``, ``evaluate`` and a config for save/load."""

    spec: EnvSpec
    chunk_size: int

    @abc.abstractmethod
    def act(self, obs: dict[str, Any], mode: str = "sample") -> PolicyOutput: ...

    @abc.abstractmethod
    def evaluate(self, obs: dict[str, Any], samples: torch.Tensor) -> PolicyEvaluation: ...

    @abc.abstractmethod
    def config_dict(self) -> dict[str, Any]: ...

    def update_normalizers(self, obs: dict[str, Any]) -> None:
        """Fold a batch of observations into the running statistics (no-op by default)."""

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "class": type(self).__name__,
            "config": self.config_dict(),
            "spec": self.spec.to_dict(),
            "state_dict": {k: v.detach().cpu() for k, v in self.state_dict().items()},  # loads anywhere
        }
        write_atomic(path, lambda tmp: torch.save(payload, tmp))

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Load weights, saying plainly which tensor does not fit (e.g. another env's state size)."""
        own = self.state_dict()
        for key, tensor in state_dict.items():
            if key not in own:
                raise ValueError(f"checkpoint has parameter {key!r} that this policy does not have")
            if own[key].shape != tensor.shape:
                raise ValueError(
                    f"checkpoint parameter {key!r} has shape {list(tensor.shape)}, this policy expects "
                    f"{list(own[key].shape)} (different env spec or policy config?)"
                )
        missing = sorted(set(own) - set(state_dict))
        if missing:
            raise ValueError(f"checkpoint lacks parameter {missing[0]!r} (different policy config?)")
        self.load_state_dict(state_dict)
