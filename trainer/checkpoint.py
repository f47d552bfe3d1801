"""Checkpoints: ``checkpoints/step_<N>/`` with the policy, the algorithm state, RNG and progress.

A checkpoint directory is written under a temporary name and renamed into place, so a killed
process never leaves a half-written ``step_<N>``.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

from policies import Policy
from policies.base import WEIGHTS_FILE
from protos.atomic_files import commit_folder
from trainer.devices import to_cpu

CHECKPOINT_DIR = "checkpoints"
POLICY_DIR = "policy"  # Policy.save's folder inside a checkpoint
LATEST = "latest"  # checkpoints/latest: a link to the newest step_<N>, a path that stays the same


@dataclass
class Progress:
    """Where a run is: iterations done, env steps taken, wall time spent."""

    iteration: int = 0
    env_steps: int = 0
    wall_s: float = 0.0


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save_checkpoint(run_dir: Path, progress: Progress, policy: Policy, algorithm: Any) -> Path:
    root = run_dir / CHECKPOINT_DIR
    final = root / f"step_{progress.env_steps}"
    tmp = root / f".step_{progress.env_steps}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    # On Ray, state_dict() lands the update in flight and brings the driver's policy to it: both
    # halves of the checkpoint are the same version.
    state = {"algorithm": to_cpu(algorithm.state_dict()), "rng": rng_state()}  # loads on any machine
    policy.save(tmp / POLICY_DIR)
    torch.save(state, tmp / "trainer_state.pt")
    if hasattr(algorithm, "save_buffers"):
        algorithm.save_buffers(tmp)
    (tmp / "progress.json").write_text(json.dumps(asdict(progress)))
    commit_folder(tmp, final)
    point_link(root / LATEST, final.name)
    return final


def point_link(link: Path, target: str) -> None:
    """Make ``link`` a relative symlink to ``target``, replaced in one step (never missing)."""
    staging = link.with_name(f".{link.name}.tmp")
    staging.unlink(missing_ok=True)
    staging.symlink_to(target)
    staging.replace(link)


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = run_dir / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    steps = [p for p in root.glob("step_*") if (p / "progress.json").exists()]
    return sorted(steps, key=lambda p: int(p.name.split("_")[1]))


def latest_checkpoint(run_dir: Path) -> Path | None:
    checkpoints = list_checkpoints(run_dir)
    return checkpoints[-1] if checkpoints else None


def prune_checkpoints(run_dir: Path, keep: int) -> None:
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old)


def load_checkpoint(path: Path, policy: Policy, algorithm: Any) -> Progress:
    policy.load_weights(load_file(str(path / POLICY_DIR / WEIGHTS_FILE)))
    state = torch.load(path / "trainer_state.pt", map_location="cpu", weights_only=False)
    algorithm.load_state_dict(state["algorithm"])
    if hasattr(algorithm, "load_buffers"):
        algorithm.load_buffers(path)
    set_rng_state(state["rng"])
    return Progress(**json.loads((path / "progress.json").read_text()))
