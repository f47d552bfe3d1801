"""The one policy interface: ``act(obs_batch, mode) -> action chunk (+ log-prob, value)``.

Every policy (MLP, CNN, later VLAs) consumes the shared batched observation layout
``{"images": {camera: uint8[B, H, W, 3]}, "state": float32[B, D], "instruction": [str] * B}`` and
returns action chunks ``[B, chunk, action_dim]`` in the env's units, within the spec's bounds.
"""

from __future__ import annotations

import abc
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn

from policies.normalization import RunningNormalizer
from protos import EnvSpec
from protos.atomic_files import commit_folder

POLICY_FILE = "policy.json"
WEIGHTS_FILE = "model.safetensors"
VALUE_HEAD_PREFIXES = ("value_head.", "critic.")  # the value head's parameter names start so
# the heads an RL run may add to an SFT start (PPO's critic, Flow-Noise's std head) and starts fresh
RL_HEAD_PREFIXES = (*VALUE_HEAD_PREFIXES, "noise_head.")


@dataclass
class PolicyOutput:
    """What ``act`` returns. ``samples`` are the raw draws that ``log_prob`` refers to."""

    actions: torch.Tensor  # [B, chunk, action_dim], env units, inside the bounds
    samples: torch.Tensor  # [B, chunk, action_dim]
    log_prob: torch.Tensor  # [B]: summed over the chunk and action dims
    value: torch.Tensor | None  # [B], when the policy has a value head
    # [B, K]: the K terms ``log_prob`` sums (one per action token, or per chunk step and action dim),
    # for token-level ratios (``algo.ratio_level=token``); None where a policy does not split them
    log_prob_terms: torch.Tensor | None = None

    def cpu(self) -> PolicyOutput:
        """The same output on the CPU (what a trajectory stores; no copy for CPU tensors)."""
        return PolicyOutput(
            self.actions.cpu(),
            self.samples.cpu(),
            self.log_prob.cpu(),
            None if self.value is None else self.value.cpu(),
            None if self.log_prob_terms is None else self.log_prob_terms.cpu(),
        )


@dataclass
class PolicyEvaluation:
    """The training forward for given samples."""

    log_prob: torch.Tensor  # [B]
    entropy: torch.Tensor  # [B]
    value: torch.Tensor | None  # [B]
    log_prob_terms: torch.Tensor | None = None  # [B, K], as in PolicyOutput


class ReparameterizedPolicy(Protocol):
    """What SAC and RLPD use: features from an encoder (trained through the critic, copied for the
    target), and reparameterised actions in [-1, 1] from those features."""

    spec: EnvSpec
    feature_encoder: nn.Module  # obs -> features; its ``out_dim`` is the critic's input size

    def rsample(
        self, obs: dict[str, Any] | None, features: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def actor_parameters(self) -> list[nn.Parameter]: ...

    def to_env_units(self, unit_actions: torch.Tensor) -> torch.Tensor: ...

    def update_normalizers(self, obs: dict[str, Any]) -> None: ...


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


def check_cameras(cameras: list[str], spec: EnvSpec) -> None:
    """Every camera a policy asks for is one the env has, or a one-line error naming it."""
    for name in cameras:
        if name not in spec.camera_names:
            raise ValueError(f"policy camera {name!r} is not in the env's cameras {list(spec.camera_names)}")


class Policy(nn.Module, abc.ABC):
    """Base class: subclasses implement ``act``, ``evaluate`` and a config for save/load.

    What the algorithms use, and nothing else: ``act`` / ``evaluate`` (PPO, GRPO), ``value`` and
    ``has_value_head`` (PPO), ``imitation_loss`` (BC, SFT), ``cameras`` (which frames to keep) and,
    for policies with ``reparameterized`` actions, the :class:`ReparameterizedPolicy` methods (SAC,
    RLPD). A VLA or a world-model policy plugs in by implementing these.
    """

    spec: EnvSpec
    chunk_size: int
    reparameterized: bool = False  # True for policies that implement ReparameterizedPolicy

    @abc.abstractmethod
    def act(self, obs: dict[str, Any], mode: str = "sample") -> PolicyOutput: ...

    @abc.abstractmethod
    def evaluate(self, obs: dict[str, Any], samples: torch.Tensor) -> PolicyEvaluation: ...

    @abc.abstractmethod
    def config_dict(self) -> dict[str, Any]: ...

    def update_normalizers(self, obs: dict[str, Any]) -> None:
        """Fold a batch of observations into the running statistics (no-op by default)."""

    def freeze_normalizers(self) -> None:
        """Keep the observation statistics as they are from now on (saved with the weights).

        A policy started from another one's weights (``policy.init_from``: BC, SFT) must see its
        inputs scaled as they were when those weights were fit: folding RL's own observations into the
        statistics rescales every input under the weights (measured: a PickLift BC start went from
        0.31 to 0.00 greedy success in one rollout of statistics updates, weights untouched)."""
        for module in self.modules():
            if isinstance(module, RunningNormalizer) and module.count >= 1:  # fit to some data
                module.frozen.fill_(True)

    @property
    def cameras(self) -> list[str]:
        """The cameras the policy looks at (the frames a rollout must keep)."""
        return []

    @property
    def has_value_head(self) -> bool:
        return False

    def value(self, obs: dict[str, Any]) -> torch.Tensor:
        """[B] state values, for policies with a value head."""
        raise ValueError(f"{type(self).__name__} has no value head")

    def value_parameters(self) -> list[nn.Parameter]:
        """The value head's own parameters (none shared with the actor); empty without one."""
        return [p for name, p in self.named_parameters() if name.startswith(VALUE_HEAD_PREFIXES)]

    def imitation_loss(
        self, obs: dict[str, Any], unit_targets: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """Supervised loss toward recorded chunks ``unit_targets`` ([B, chunk, A] in [-1, 1]) over the
        ``valid`` ([B, chunk]) steps: what behaviour cloning and SFT minimise."""
        raise ValueError(f"{type(self).__name__} cannot be trained by imitation")

    def to_env_units(self, unit_actions: torch.Tensor) -> torch.Tensor:
        """[-1, 1] -> the spec's bounds."""
        low = torch.as_tensor(self.spec.action.low_array(), device=unit_actions.device)
        high = torch.as_tensor(self.spec.action.high_array(), device=unit_actions.device)
        return low + (unit_actions + 1.0) * 0.5 * (high - low)

    def save(self, path: str | Path) -> None:
        """Write the policy as a folder: ``policy.json`` (class, config, env spec) and
        ``model.safetensors`` (weights, no pickle), plus whatever ``save_extras`` adds. The folder
        appears whole or not at all."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.parent / f".{path.name}.tmp"
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir()
        header = {"class": type(self).__name__, "config": self.config_dict(), "spec": self.spec.to_dict()}
        (staging / POLICY_FILE).write_text(json.dumps(header, indent=2))
        weights = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(weights, str(staging / WEIGHTS_FILE))
        self.save_extras(staging)
        commit_folder(staging, path)

    def save_extras(self, folder: Path) -> None:
        """Files a policy needs besides its weights (a VLA's tokenizer and processor)."""

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
