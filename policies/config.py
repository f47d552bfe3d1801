"""Typed policy configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protos.typed_config import dataclass_from_dict

# The published families, randomly initialised at about a million parameters (tests, CPU runs):
TINY_BACKBONES = ("tiny:openvla", "tiny:openvla-oft", "tiny:pi0", "tiny:pi05", "tiny:smolvla")
FLOW_SDE_STEPS = ("all", "one")  # policy.vla.flow_sde_steps
FLOW_NOISE_METHODS = ("flow_sde", "flow_noise")  # policy.vla.flow_noise_method (πRL's two samplers)
# Keys of the look-alike VLA (our own heads on LLaVA / PaliGemma backbones), removed once the real
# families carried every test, preset and benchmark; a config that still has one is told so.
REMOVED_VLA_KEYS = ("head", "action_bins", "max_instruction_tokens", "state_tokens", "gradient_checkpointing",
                    "expert_width", "expert_layers")  # fmt: skip


@dataclass(frozen=True)
class VLAConfig:
    """A vision-language-action model (``policy.kind=vla``) as upstream publishes it: OpenVLA /
    OpenVLA-OFT (action tokens) or π0 / π0.5 / SmolVLA (flow matching); see :mod:`policies.vla`.
    ``checkpoint`` names a published folder (its layout says the family); without one, ``backbone``
    names a tiny randomly initialised instance of a family."""

    backbone: str = "tiny:openvla-oft"  # one of TINY_BACKBONES (ignored when checkpoint is set)
    checkpoint: str = ""  # a published folder: OpenVLA / OFT, openpi or LeRobot π0 / π0.5, LeRobot SmolVLA
    parallel_decoding: bool = False  # OpenVLA: a chunk per pass, as OFT (tiny:openvla-oft and OFT folders do)
    detach_value_head: bool = True  # PPO's critic reads the backbone's state without moving it
    lora_rank: int = 0  # 0 trains every weight; >0 adds LoRA adapters to the language model(s) (peft)
    dtype: str = "float32"  # "float32" or "bfloat16" (the model's weights; the value head stays float32)
    flow_steps: int = 5  # π0 / π0.5 / SmolVLA: denoising steps per chunk (upstream samples with 10)
    # flow: how rollouts explore, πRL's "flow_sde" (the SDE with flow_noise_level) or "flow_noise" (Euler steps
    # plus a std that a small head learns from the expert's output, within flow_noise_std_range)
    flow_noise_method: str = "flow_sde"
    flow_noise_level: float = 0.5  # flow_sde: the SDE's noise scale ``a`` (sigma_t = a sqrt(t / (1 - t)))
    # flow_noise: the [min, max] of the learned std (RLinf's noise_logvar_range)
    flow_noise_std_range: list[float] = field(default_factory=lambda: [0.08, 0.16])
    # rollouts: softmax(logits / T) (tokens, T > 0), chains from N(0, T²I) (flow; T = 0 starts every chain at
    # x0 = 0, the greedy chain's start, and leaves the exploring to the noisy steps)
    sampling_temperature: float = 1.0
    # flow: "all" denoising steps are the SDE's (the chunk's log-prob sums them), or "one" random step per
    # chunk is and the rest are upstream's Euler steps (its log-prob is that step's; RLinf's joint_logprob: false)
    flow_sde_steps: str = "all"
    dims: str = ""  # sizes where the checkpoint's config names variants its weights do not have
    tokenizer: str = ""  # the tokenizer's folder, where the checkpoint has none (openpi's never does)
    asset_id: str = ""  # openpi: which assets/<asset_id>/norm_stats.json
    train_vision: bool = False  # the vision tower trains too (frozen by default, as upstream's LoRA)
    train_expert_only: bool = False  # π0 / π0.5 / SmolVLA: the VLM frozen, the expert trains (LeRobot's)
    unnorm_key: str = ""  # OpenVLA: which of the checkpoint's norm_stats map its bins to actions

    def __post_init__(self) -> None:
        if not self.checkpoint and self.backbone not in TINY_BACKBONES:
            raise ValueError(
                f"policy.vla.backbone={self.backbone!r} is not a tiny family; use one of {list(TINY_BACKBONES)}, "
                "or policy.vla.checkpoint=PATH for a published folder"
            )
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"policy.vla.dtype must be 'float32' or 'bfloat16', got {self.dtype!r}")
        if self.flow_steps < 1:
            raise ValueError(f"policy.vla.flow_steps must be >= 1, got {self.flow_steps}")
        if not self.sampling_temperature >= 0:
            raise ValueError(f"policy.vla.sampling_temperature must be >= 0, got {self.sampling_temperature}")
        if self.flow_noise_method not in FLOW_NOISE_METHODS:
            raise ValueError(
                f"policy.vla.flow_noise_method must be one of {list(FLOW_NOISE_METHODS)}, got {self.flow_noise_method!r}"
            )
        low_high = list(self.flow_noise_std_range)
        if len(low_high) != 2 or not 0 < low_high[0] <= low_high[1]:
            raise ValueError(
                f"policy.vla.flow_noise_std_range must be [min, max] with 0 < min <= max, got {low_high}"
            )
        if (
            self.sampling_temperature == 0
            and self.flow_noise_method == "flow_sde"
            and self.flow_noise_level == 0
        ):
            raise ValueError(
                "policy.vla.sampling_temperature=0 with flow_noise_level=0 leaves nothing random to explore with; "
                "set one of them > 0"
            )
        if self.flow_sde_steps not in FLOW_SDE_STEPS:
            raise ValueError(
                f"policy.vla.flow_sde_steps must be one of {list(FLOW_SDE_STEPS)}, got {self.flow_sde_steps!r}"
            )
        if self.lora_rank < 0:
            raise ValueError(f"policy.vla.lora_rank must be >= 0, got {self.lora_rank}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VLAConfig:
        for key in data:
            if key in REMOVED_VLA_KEYS:
                raise ValueError(
                    f"policy.vla.{key} belonged to the look-alike VLA heads, which are gone: the family "
                    f"(policy.vla.backbone, one of {list(TINY_BACKBONES)}, or policy.vla.checkpoint) decides the head"
                )
        return dataclass_from_dict(cls, data, "policy.vla")


@dataclass(frozen=True)
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
            object.__setattr__(self, "vla", VLAConfig.from_dict(self.vla))
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
        if isinstance(data, dict) and isinstance(data.get("vla"), dict):
            data = {**data, "vla": VLAConfig.from_dict(data["vla"])}
        return dataclass_from_dict(cls, data, "policy config")
