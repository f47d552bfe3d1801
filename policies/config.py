"""Typed policy configuration."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

VLA_HEADS = ("tokens", "flow")


@dataclass
class VLAConfig:
    """A vision-language-action model (``policy.kind=vla``); see :mod:`policies.vla`."""

    backbone: str = "tiny:llava-llama"  # a local Hugging Face model folder, or tiny:<family>
    head: str = "tokens"  # "tokens" (OpenVLA: binned action tokens) or "flow" (pi0: flow matching)
    parallel_decoding: bool = False  # tokens: one parallel pass (OpenVLA-OFT) instead of token by token
    action_bins: int = 256  # tokens: bins per action dimension
    max_instruction_tokens: int = 48  # the instruction is cut to this many tokens
    state_tokens: str = "one"  # "one" (the state as one token) or "fields" (a token per state field)
    detach_value_head: bool = True  # PPO's critic reads the backbone's state without moving it
    lora_rank: int = 0  # 0 trains every weight; >0 adds LoRA adapters to the text model (peft)
    dtype: str = "float32"  # "float32" or "bfloat16" (the backbone's weights; heads stay float32)
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (less GPU memory)
    flow_steps: int = 5  # flow: denoising steps per chunk
    flow_noise_level: float = 0.5  # flow: the SDE's noise scale ``a`` (sigma_t = a sqrt(t / (1 - t)))
    expert_width: int = 128  # flow: the action expert's width
    expert_layers: int = 2  # flow: the action expert's layers
    # The published families as upstream defines them (a checkpoint folder, or backbone tiny:pi0 /
    # tiny:pi05 / tiny:openvla):
    checkpoint: str = ""  # an openpi or LeRobot π0 / π0.5 folder (policies.vla.pi.checkpoint)
    dims: str = ""  # sizes where the checkpoint's config names variants its weights do not have
    tokenizer: str = ""  # the PaliGemma tokenizer's folder, where the checkpoint has none
    asset_id: str = ""  # openpi: which assets/<asset_id>/norm_stats.json
    train_vision: bool = False  # π: the SigLIP tower trains too (frozen by default, as openpi's LoRA)
    unnorm_key: str = ""  # OpenVLA: which of the checkpoint's norm_stats map its bins to actions

    def __post_init__(self) -> None:
        if self.head not in VLA_HEADS:
            raise ValueError(f"policy.vla.head must be one of {VLA_HEADS}, got {self.head!r}")
        if not 2 <= self.action_bins <= 1024:
            raise ValueError(f"policy.vla.action_bins must be in [2, 1024], got {self.action_bins}")
        if self.state_tokens not in ("one", "fields"):
            raise ValueError(f"policy.vla.state_tokens must be 'one' or 'fields', got {self.state_tokens!r}")
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"policy.vla.dtype must be 'float32' or 'bfloat16', got {self.dtype!r}")
        if self.flow_steps < 1:
            raise ValueError(f"policy.vla.flow_steps must be >= 1, got {self.flow_steps}")
        if self.lora_rank < 0:
            raise ValueError(f"policy.vla.lora_rank must be >= 0, got {self.lora_rank}")


@dataclass
class PolicyConfig:
    """Small MLP / CNN policies, or a VLA. ``kind="cnn"`` adds an image encoder per listed camera;
    ``kind="vla"`` builds the model that ``vla`` describes, looking at ``cameras``."""

    kind: str = "mlp"  # "mlp" (state), "cnn" (images + state) or "vla" (images + instruction + state)
    head: str = "gaussian"  # "gaussian" (PPO/GRPO) or "tanh_gaussian" (SAC/RLPD)
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # the MLP trunk's layer widths
    activation: str = "tanh"  # "tanh" or "relu"
    chunk_size: int = 1  # actions per decision (action chunking); the env plays them in turn
    init_log_std: float = -0.5  # the Gaussian head's initial log standard deviation (exploration)
    value_head: bool = True  # a critic for PPO (GRPO, BC and SAC's actor need none)
    normalize_state: bool = True  # running mean / std of the state, saved with the policy
    cameras: list[str] = field(default_factory=list)  # the env cameras this policy looks at (cnn, vla)
    cnn_channels: list[int] = field(
        default_factory=lambda: [16, 32, 32]
    )  # channels of each conv layer of the image encoder (cnn)
    cnn_features: int = 256  # the image encoder's output width per camera (cnn)
    vla: VLAConfig = field(default_factory=VLAConfig)
    init_from: str = ""  # a saved policy (Policy.save's folder) whose weights start this one, e.g. SFT

    def __post_init__(self) -> None:
        if isinstance(self.vla, dict):
            self.vla = VLAConfig(**self.vla)
        if self.kind not in ("mlp", "cnn", "vla"):
            raise ValueError(f"policy.kind must be 'mlp', 'cnn' or 'vla', got {self.kind!r}")
        if self.head not in ("gaussian", "tanh_gaussian"):
            raise ValueError(f"policy.head must be 'gaussian' or 'tanh_gaussian', got {self.head!r}")
        if self.activation not in ("tanh", "relu"):
            raise ValueError(f"policy.activation must be 'tanh' or 'relu', got {self.activation!r}")
        if self.chunk_size < 1:
            raise ValueError(f"policy.chunk_size must be >= 1, got {self.chunk_size}")
        if self.kind in ("cnn", "vla") and not self.cameras:
            raise ValueError(f"policy.kind={self.kind!r} needs at least one camera in policy.cameras")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicyConfig:
        """From a saved config; keys of other versions are named in the error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown policy config key {unknown[0]!r}; known: {sorted(known)}")
        return cls(**data)
