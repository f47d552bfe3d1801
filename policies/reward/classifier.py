"""A binary success classifier: one small CNN per camera plus the normalised state, to one logit.

Saved like a policy (a folder of ``classifier.json`` and ``model.safetensors``), with its env spec,
so the trainer can check that a robot's cameras and state match before it scores any frame.
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

from policies.actor_critic import ObservationEncoder
from policies.base import WEIGHTS_FILE, to_tensors
from policies.encoders import mlp
from protos import EnvSpec
from protos.atomic_files import commit_folder

CLASSIFIER_FILE = "classifier.json"


@dataclass
class ClassifierConfig:
    """Which inputs the classifier reads, and how big it is."""

    cameras: list[str] = field(default_factory=lambda: ["front"])
    use_state: bool = True
    cnn_channels: list[int] = field(default_factory=lambda: [16, 32, 32])
    cnn_features: int = 128
    hidden_sizes: list[int] = field(default_factory=lambda: [128])
    threshold: float = 0.5  # probability above which a frame counts as success

    def __post_init__(self) -> None:
        if not self.cameras and not self.use_state:
            raise ValueError("the reward classifier needs at least one camera or use_state=true")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"the classifier threshold must be in (0, 1), got {self.threshold}")


class SuccessClassifier(nn.Module):
    """P(success | frames, state) for a batch in the shared observation layout."""

    def __init__(self, spec: EnvSpec, cfg: ClassifierConfig) -> None:
        super().__init__()
        self.spec, self.cfg = spec, cfg
        self.encoder = ObservationEncoder(
            spec, cfg.cameras, cfg.cnn_channels, cfg.cnn_features, use_state=cfg.use_state
        )
        self.head = mlp([self.encoder.out_dim, *cfg.hidden_sizes, 1], nn.ReLU)

    @property
    def device(self) -> torch.device:
        return next(self.head.parameters()).device

    def logits(self, obs: dict[str, Any]) -> torch.Tensor:
        """[B] success logits."""
        return self.head(self.encoder(to_tensors(obs, self.device))).squeeze(-1)

    @torch.no_grad()
    def probability(self, obs: dict[str, Any]) -> torch.Tensor:
        return torch.sigmoid(self.logits(obs))

    def save(self, path: str | Path) -> None:
        path = Path(path)
        staging = path.parent / f".{path.name}.tmp"
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        header = {"config": asdict(self.cfg), "spec": self.spec.to_dict()}
        (staging / CLASSIFIER_FILE).write_text(json.dumps(header, indent=2))
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()},
            str(staging / WEIGHTS_FILE),
        )
        commit_folder(staging, path)


def load_classifier(path: str | Path) -> SuccessClassifier:
    """A classifier saved with :meth:`SuccessClassifier.save`."""
    path = Path(path)
    if not (path / CLASSIFIER_FILE).is_file():
        raise ValueError(f"{path} is not a saved reward classifier (no {CLASSIFIER_FILE})")
    header = json.loads((path / CLASSIFIER_FILE).read_text())
    classifier = SuccessClassifier(EnvSpec.from_dict(header["spec"]), ClassifierConfig(**header["config"]))
    classifier.load_state_dict(load_file(str(path / WEIGHTS_FILE)))
    return classifier
