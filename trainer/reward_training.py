"""Training the reward classifier (``rlinf-trainer train --config reward_classifier``), read top to bottom.

1. Frames and labels come from a LeRobot v3 dataset: ``label=frame`` takes each frame's
   ``next.success``; ``label=episode`` marks the last ``final_frames`` frames of the episodes whose
   ``success`` is true (teleop's success/failure key) and every other frame negative.
2. Whole episodes are held out (``holdout_fraction``, the last ones), so the held-out figures are on
   frames the classifier never saw a neighbour of.
3. Plain binary cross-entropy (so the probabilities stay calibrated to the data), random image shifts.
4. Next to the checkpoint (``<run>/classifier/``): ``metrics.json`` with held-out precision, recall,
   accuracy and a 10-bin calibration table (with its expected calibration error), and
   ``calibration.png`` where matplotlib is installed.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from policies.reward import ClassifierConfig, SuccessClassifier
from protos import EnvSpec
from protos.lerobot_dataset import DatasetError
from trainer.algorithms.common import random_shift
from trainer.configs.errors import ConfigError

LABELS = ("frame", "episode")


@dataclass
class RewardClassifierConfig:
    dataset: str = ""  # a LeRobot v3 dataset folder
    label: str = "frame"  # "frame": next.success per frame; "episode": the end of successful episodes
    final_frames: int = 5  # label=episode: how many last frames of a successful episode are positive
    cameras: list[str] = field(default_factory=lambda: ["front"])
    use_state: bool = True
    holdout_fraction: float = 0.2
    epochs: int = 8
    batch_size: int = 128
    learning_rate: float = 1e-3
    image_shift: int = 4
    threshold: float = 0.5


class RewardClassifierTraining:
    """Supervised, not an RL algorithm: ``rlinf-trainer train`` runs :func:`train_reward_classifier`."""

    config_class = RewardClassifierConfig
    standalone = True


@dataclass
class LabelledFrames:
    states: np.ndarray  # float32 [N, D]
    images: dict[str, np.ndarray]  # camera -> uint8 [N, H, W, 3]
    labels: np.ndarray  # float32 [N]
    episodes: np.ndarray  # int [N]


def labelled_frames(cfg: RewardClassifierConfig, spec: EnvSpec) -> LabelledFrames:
    """The dataset's frames with success labels, checked against the env's state and cameras."""
    from protos.lerobot_reader import read_camera, read_episodes, read_frames

    if cfg.label not in LABELS:
        raise ConfigError(f"algo.label must be one of {LABELS}, got {cfg.label!r}")
    frames = read_frames(cfg.dataset)
    episodes = frames["episode_index"].to_numpy()
    if cfg.label == "frame":
        if "next.success" not in frames.columns:
            raise DatasetError(
                "it has no 'next.success' column to label frames with (try algo.label=episode)"
            )
        labels = frames["next.success"].to_numpy().astype(np.float32)
    else:
        rows = read_episodes(cfg.dataset)
        if "success" not in rows.columns:
            raise DatasetError(
                "its episodes have no 'success' label (teleop records one; or use algo.label=frame)"
            )
        successful = set(rows.loc[rows["success"].astype(bool), "episode_index"].astype(int))
        steps_left = frames.groupby("episode_index")["frame_index"].transform("max") - frames["frame_index"]
        labels = (np.isin(episodes, list(successful)) & (steps_left.to_numpy() < cfg.final_frames)).astype(
            np.float32
        )
    if labels.sum() == 0 or labels.sum() == len(labels):
        raise DatasetError(
            f"its frames are all {'negative' if labels.sum() == 0 else 'positive'}; both are needed"
        )
    states = np.stack(frames["observation.state"].to_numpy()).astype(np.float32)
    if states.shape[1] != spec.state_dim:
        raise DatasetError(f"its state has {states.shape[1]} values, the env's {spec.state_dim}")
    images = {}
    for camera in cfg.cameras:
        per_episode = read_camera(cfg.dataset, camera, np.unique(episodes))
        images[camera] = np.stack(
            [per_episode[e][t] for e, t in zip(episodes, frames["frame_index"].to_numpy())]
        )
        if images[camera].shape[1:] != tuple(spec.camera(camera).shape):
            raise DatasetError(
                f"camera {camera!r} frames are {list(images[camera].shape[1:])}, the env's {list(spec.camera(camera).shape)}"
            )
    return LabelledFrames(states, images, labels, episodes)


def split_by_episode(data: LabelledFrames, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (train, held out): the last ``fraction`` of the episodes are held out."""
    unique = np.unique(data.episodes)
    held = unique[len(unique) - max(1, round(fraction * len(unique))) :] if len(unique) > 1 else unique[:0]
    held_out = np.isin(data.episodes, held)
    return np.flatnonzero(~held_out), np.flatnonzero(held_out)


def held_out_metrics(probabilities: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, Any]:
    """Precision, recall, accuracy at ``threshold``, and a 10-bin calibration table with its ECE."""
    predicted = probabilities >= threshold
    positive = labels > 0.5
    true_pos = float((predicted & positive).sum())
    bins = []
    edges = np.linspace(0.0, 1.0, 11)
    for low, high in itertools.pairwise(edges):
        inside = (probabilities >= low) & ((probabilities < high) if high < 1.0 else (probabilities <= high))
        if inside.any():
            bins.append({"low": float(low), "high": float(high), "count": int(inside.sum()),
                         "mean_predicted": float(probabilities[inside].mean()),
                         "fraction_positive": float(positive[inside].mean())})  # fmt: skip
    ece = sum(b["count"] * abs(b["mean_predicted"] - b["fraction_positive"]) for b in bins) / max(
        len(labels), 1
    )
    return {
        "frames": len(labels),
        "positives": int(positive.sum()),
        "precision": true_pos / max(float(predicted.sum()), 1.0),
        "recall": true_pos / max(float(positive.sum()), 1.0),
        "accuracy": float((predicted == positive).mean()),
        "expected_calibration_error": float(ece),
        "calibration": bins,
    }


def plot_calibration(metrics: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    bins = metrics["calibration"]
    fig, ax = plt.subplots(figsize=(4, 4))
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="calibrated")
    ax.plot(
        [b["mean_predicted"] for b in bins], [b["fraction_positive"] for b in bins], "o-", label="held out"
    )
    ax.set(xlabel="predicted P(success)", ylabel="fraction successful", xlim=(0, 1), ylim=(0, 1),
           title=f"ECE {metrics['expected_calibration_error']:.3f}")  # fmt: skip
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def train_reward_classifier(cfg: RewardClassifierConfig, spec: EnvSpec, run_dir: Path, seed: int = 0) -> dict:
    """Fit, evaluate on held-out episodes, save ``<run_dir>/classifier`` and its figures; returns the metrics."""
    if not cfg.dataset:
        raise ConfigError("reward_classifier needs algo.dataset, a LeRobot v3 dataset folder")
    try:
        data = labelled_frames(cfg, spec)
    except DatasetError as exc:
        raise ConfigError(f"algo.dataset={cfg.dataset!r}: {exc}") from None
    torch.manual_seed(seed)
    classifier = SuccessClassifier(
        spec, ClassifierConfig(list(cfg.cameras), cfg.use_state, threshold=cfg.threshold)
    )
    train_rows, held_rows = split_by_episode(data, cfg.holdout_fraction)
    states = torch.as_tensor(data.states)
    images = {c: torch.as_tensor(v) for c, v in data.images.items()}
    labels = torch.as_tensor(data.labels)
    classifier.encoder.state_norm.update(states[train_rows])
    optimizer = torch.optim.Adam(classifier.parameters(), lr=cfg.learning_rate)
    steps = cfg.epochs * max(1, len(train_rows) // cfg.batch_size)
    losses = []
    for _ in tqdm(range(steps), desc="reward classifier", unit="batch"):
        idx = torch.as_tensor(train_rows[torch.randint(0, len(train_rows), (cfg.batch_size,)).numpy()])
        batch = {
            "state": states[idx],
            "images": {c: random_shift(v[idx], cfg.image_shift) for c, v in images.items()},
        }
        loss = torch.nn.functional.binary_cross_entropy_with_logits(classifier.logits(batch), labels[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    rows = held_rows if len(held_rows) else train_rows
    probabilities = np.concatenate([
        classifier.probability({"state": states[chunk], "images": {c: v[chunk] for c, v in images.items()}}).numpy()
        for chunk in np.array_split(rows, max(1, len(rows) // 512))
    ])  # fmt: skip
    metrics = {
        **held_out_metrics(probabilities, data.labels[rows], cfg.threshold),
        "held_out_episodes": len(np.unique(data.episodes[held_rows])),
        "train_frames": len(train_rows),
        "loss_first": float(np.mean(losses[: max(1, len(losses) // 10)])),
        "loss_last": float(np.mean(losses[-max(1, len(losses) // 10) :])),
    }
    out = run_dir / "classifier"
    classifier.save(out)
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    plot_calibration(metrics, run_dir / "calibration.png")
    return metrics
