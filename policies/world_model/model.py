"""The world model: camera frames through a learned latent, the state, and one step of dynamics.

    z_t = encode(images_t)                                  (a CNN per camera, to one latent)
    z_{t+1}, s_{t+1} = dynamics(z_t, s_t, a_t)              (an ensemble of MLPs; their mean)
    r_t, success_t = outcome(z_{t+1}, s_{t+1})              (judged from the predicted observation)
    images = decode(z)                                      (a transposed CNN per camera)

Reward and success are read off the *predicted next observation*, as a reward classifier reads a
camera frame, not from the dynamics' hidden features: a policy trained inside the model then has to
drive the predicted scene into a success state, not find actions whose hidden features happen to
excite a success head (measured on the PickLift twin: with the head on the hidden features, PPO in
the model reached 85 % imagined success and 0 % real). The members' disagreement marks states the
recorded data did not cover; the env halts an imagined episode there (MOReL's "unknown" state).

The state is predicted as a change in normalised units; actions enter in the policy's [-1, 1] units.
Saved like a policy: a folder of ``world_model.json`` (config, env spec, task text, start frames'
file) and ``model.safetensors``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from policies.base import WEIGHTS_FILE
from policies.encoders import ImageEncoder, mlp
from policies.normalization import RunningNormalizer
from protos import EnvSpec
from protos.atomic_files import commit_folder

MODEL_FILE = "world_model.json"


@dataclass
class WorldModelConfig:
    cameras: list[str] = field(default_factory=list)  # the cameras it predicts (and a policy may read)
    latent_dim: int = 64
    hidden: int = 256
    cnn_channels: list[int] = field(default_factory=lambda: [16, 32, 32])
    ensemble: int = 5  # dynamics members; where they disagree, the data did not cover the state


@dataclass(frozen=True)
class Prediction:
    """One imagined step: the members' mean next latent and state, the outcome judged from them,
    and how much the members disagree (std over members, the largest over normalised state dims:
    an unknown contact shows in a few dims, like the object's, and a mean over all would dilute it)."""

    latent: torch.Tensor
    state: torch.Tensor
    reward: torch.Tensor
    success_logit: torch.Tensor
    disagreement: torch.Tensor


class FrameDecoder(nn.Module):
    """Latent -> one camera's uint8-range frame [B, H, W, 3] (float in [0, 1]), for 32-128 px cameras."""

    def __init__(self, latent_dim: int, height: int, width: int) -> None:
        super().__init__()
        self.height, self.width = height, width
        self.base = (max(1, height // 8), max(1, width // 8))
        self.project = nn.Linear(latent_dim, 32 * self.base[0] * self.base[1])
        self.up = nn.Sequential(
            nn.ReLU(), nn.ConvTranspose2d(32, 32, 4, 2, 1),
            nn.ReLU(), nn.ConvTranspose2d(32, 16, 4, 2, 1),
            nn.ReLU(), nn.ConvTranspose2d(16, 3, 4, 2, 1),
        )  # fmt: skip

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.project(z).reshape(-1, 32, *self.base)
        x = nn.functional.interpolate(self.up(x), size=(self.height, self.width), mode="bilinear")
        return torch.sigmoid(x).permute(0, 2, 3, 1)


class Dynamics(nn.Module):
    """One ensemble member: (latent, normalised state, action) -> (next latent, next state)."""

    def __init__(self, latent_dim: int, state_dim: int, action_dim: int, hidden: int) -> None:
        super().__init__()
        self.trunk = mlp([latent_dim + state_dim + action_dim, hidden, hidden], nn.ELU)
        self.next_latent = nn.Linear(hidden, latent_dim) if latent_dim else None
        self.state_delta = nn.Linear(hidden, state_dim)

    def forward(
        self, z: torch.Tensor, norm_state: torch.Tensor, unit_action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = nn.functional.elu(self.trunk(torch.cat([z, norm_state, unit_action], dim=-1)))
        next_z = z + self.next_latent(h) if self.next_latent is not None else z
        return next_z, norm_state + self.state_delta(h)


def batched_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A linear layer per member: x [M, B, in], weight [M, out, in], bias [M, out] -> [M, B, out]."""
    return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


class WorldModel(nn.Module):
    """Action-conditioned next observation, reward and success for one env spec."""

    def __init__(self, spec: EnvSpec, cfg: WorldModelConfig) -> None:
        super().__init__()
        if cfg.ensemble < 1:
            raise ValueError(f"the world model's ensemble must have at least 1 member, got {cfg.ensemble}")
        self.spec, self.cfg = spec, cfg
        for name in cfg.cameras:
            spec.camera(name)  # a KeyError naming the cameras the spec has
        self.state_norm = RunningNormalizer(spec.state_dim)
        self.encoders = nn.ModuleDict(
            {
                n: ImageEncoder(tuple(cfg.cnn_channels), cfg.latent_dim, spec.camera(n).shape[:2])
                for n in cfg.cameras
            }
        )
        self.decoders = nn.ModuleDict(
            {n: FrameDecoder(cfg.latent_dim, *spec.camera(n).shape[:2]) for n in cfg.cameras}
        )
        self.latent_dim = cfg.latent_dim * max(1, len(cfg.cameras)) if cfg.cameras else 0
        self.members = nn.ModuleList(
            Dynamics(self.latent_dim, spec.state_dim, spec.action.dim, cfg.hidden)
            for _ in range(cfg.ensemble)
        )
        self.outcome = mlp([self.latent_dim + spec.state_dim, cfg.hidden, cfg.hidden, 2], nn.ELU)

    # -- pieces ----------------------------------------------------------------------------------
    def encode(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """uint8 frames per camera [B, H, W, 3] -> latent [B, latent_dim] (empty without cameras)."""
        if not self.cfg.cameras:
            rows = next(iter(images.values())).shape[0] if images else 0
            return torch.zeros(rows, 0, device=self.state_norm.mean.device)
        return torch.cat([self.encoders[n](images[n]) for n in self.cfg.cameras], dim=-1)

    def decode(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        """Latent -> frames per camera, float in [0, 1], [B, H, W, 3]."""
        parts = z.split(self.cfg.latent_dim, dim=-1)
        return {n: self.decoders[n](part) for n, part in zip(self.cfg.cameras, parts)}

    def member_weights(self) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
        """Each dynamics layer's weight [M, out, in] and bias [M, out], stacked over the members
        (trunk, trunk, latent head, state head; None for an absent latent head). Gradients reach
        every member's own parameters; a caller stepping many times in one update stacks once."""
        layers = (
            lambda d: d.trunk[0],
            lambda d: d.trunk[2],
            lambda d: d.next_latent,
            lambda d: d.state_delta,
        )
        stacked = []
        for layer in layers:
            if layer(self.members[0]) is None:
                stacked.append(None)
                continue
            weight = torch.stack([layer(member).weight for member in self.members])
            stacked.append((weight, torch.stack([layer(member).bias for member in self.members])))
        return stacked

    def members_step(
        self,
        z: torch.Tensor,
        norm_state: torch.Tensor,
        unit_action: torch.Tensor,
        weights: list[tuple[torch.Tensor, torch.Tensor] | None] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every member's next latent and state, [M, B, ...]: each member's ``Dynamics.forward``,
        all members in one batched matmul per layer. ``z`` and ``norm_state`` are either shared
        [B, ...] or per member [M, B, ...] (members rolling out on their own)."""
        members = len(self.members)
        per_member = lambda x: x if x.dim() == 3 else x.expand(members, *x.shape)  # noqa: E731
        z, norm_state = per_member(z), per_member(norm_state)
        first, second, latent_head, state_head = weights or self.member_weights()
        x = torch.cat([z, norm_state, per_member(unit_action)], dim=-1)
        h = nn.functional.elu(batched_linear(x, *first))
        h = nn.functional.elu(batched_linear(h, *second))
        next_z = z + batched_linear(h, *latent_head) if latent_head is not None else z
        return next_z, norm_state + batched_linear(h, *state_head)

    def judge(self, z: torch.Tensor, norm_state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(reward, success logit) of an observation: its latent and normalised state."""
        reward, success_logit = self.outcome(torch.cat([z, norm_state], dim=-1)).unbind(-1)
        return reward, success_logit

    def step(self, z: torch.Tensor, norm_state: torch.Tensor, unit_action: torch.Tensor) -> Prediction:
        """One imagined step from shared [B, ...] inputs: the members' mean, judged."""
        zs, states = self.members_step(z, norm_state, unit_action)
        next_z, next_state = zs.mean(0), states.mean(0)
        reward, success_logit = self.judge(next_z, next_state)
        disagreement = states.std(0, unbiased=False).amax(-1)
        return Prediction(next_z, next_state, reward, success_logit, disagreement)

    def normalize(self, state: torch.Tensor) -> torch.Tensor:
        return self.state_norm(state)

    def denormalize(self, norm_state: torch.Tensor) -> torch.Tensor:
        std = torch.sqrt(self.state_norm.var + 1e-8).to(norm_state.dtype)
        return norm_state * std + self.state_norm.mean.to(norm_state.dtype)

    # -- saving ----------------------------------------------------------------------------------
    def save(self, path: str | Path, extra: dict[str, Any] | None = None, files: dict | None = None) -> None:
        """The folder, appearing whole; ``files`` maps more file names to functions that write them."""
        path = Path(path)
        staging = path.parent / f".{path.name}.tmp"
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        header = {"config": asdict(self.cfg), "spec": self.spec.to_dict(), **(extra or {})}
        (staging / MODEL_FILE).write_text(json.dumps(header, indent=2))
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()},
            str(staging / WEIGHTS_FILE),
        )
        for name, write in (files or {}).items():
            write(staging / name)
        commit_folder(staging, path)


def load_world_model(path: str | Path) -> tuple[WorldModel, dict[str, Any]]:
    """A saved world model and its header (config, spec and what training added)."""
    path = Path(path)
    if not (path / MODEL_FILE).is_file():
        raise ValueError(f"{path} is not a saved world model (no {MODEL_FILE})")
    header = json.loads((path / MODEL_FILE).read_text())
    model = WorldModel(EnvSpec.from_dict(header["spec"]), WorldModelConfig(**header["config"]))
    model.load_state_dict(load_file(str(path / WEIGHTS_FILE)))
    return model, header
