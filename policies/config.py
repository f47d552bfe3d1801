"""Typed policy configuration."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PolicyConfig:
    """Small MLP / CNN policies. ``kind="cnn"`` adds an image encoder per listed camera."""

    kind: str = "mlp"  # "mlp" (state) or "cnn" (images + state)
    head: str = "gaussian"  # "gaussian" (PPO/GRPO) or "tanh_gaussian" (SAC/RLPD)
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "tanh"  # "tanh" or "relu"
    chunk_size: int = 1
    init_log_std: float = -0.5
    value_head: bool = True
    normalize_state: bool = True
    cameras: list[str] = field(default_factory=list)
    cnn_channels: list[int] = field(default_factory=lambda: [16, 32, 32])
    cnn_features: int = 256

    def __post_init__(self) -> None:
        if self.kind not in ("mlp", "cnn"):
            raise ValueError(f"policy.kind must be 'mlp' or 'cnn', got {self.kind!r}")
        if self.head not in ("gaussian", "tanh_gaussian"):
            raise ValueError(f"policy.head must be 'gaussian' or 'tanh_gaussian', got {self.head!r}")
        if self.activation not in ("tanh", "relu"):
            raise ValueError(f"policy.activation must be 'tanh' or 'relu', got {self.activation!r}")
        if self.chunk_size < 1:
            raise ValueError(f"policy.chunk_size must be >= 1, got {self.chunk_size}")
        if self.kind == "cnn" and not self.cameras:
            raise ValueError("policy.kind='cnn' needs at least one camera in policy.cameras")
