"""Behaviour cloning from a LeRobot v3 dataset, read top to bottom.

The dataset is loaded once (:mod:`trainer.algorithms.demonstrations`): states, the policy's cameras'
frames decoded from the mp4s, and for each frame the recorded action (``algo.action_key``) and the
next ``chunk_size - 1``. Each iteration runs ``updates_per_iteration`` regression steps on random
minibatches: the squashed mean of the policy's action distribution against the recorded chunk, in
the policy's [-1, 1] units, over the valid chunk steps only. Camera frames get a DrQ random shift.
The iteration then plays one greedy episode per env, so the run logs return and success like every
other algorithm. ``only_interventions`` keeps just the frames a human drove (HG-DAgger's expert data).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from policies import Policy
from protos.batch import VectorEnv
from protos.lerobot_dataset import DatasetError
from trainer.algorithms.common import IterationResult, play_greedy, random_shift
from trainer.algorithms.demonstrations import (
    Demonstrations,
    check_layout,
    describe_empty,
    load_demonstrations,
)
from trainer.devices import module_device


@dataclass
class BCConfig:
    dataset: str = ""  # a LeRobot v3 dataset folder
    action_key: str = "action"  # the executed action; "complementary_info.human_action" for the human's own
    only_interventions: bool = False  # keep only the frames where a human drove
    learning_rate: float = 1e-3  # Adam's step size
    batch_size: int = 256  # frames per update
    updates_per_iteration: int = 200  # gradient updates per iteration (each logs metrics, may evaluate)
    image_shift: int = 4  # DrQ random shift of camera frames in pixels, 0 disables


def policy_demonstrations(policy: Policy, root: str, action_key: str, selection: str) -> Demonstrations:
    """A dataset's frames as ``policy`` needs them: its chunk size and its cameras."""
    return load_demonstrations(root, action_key, selection, policy.chunk_size, policy.cameras)


class Regression:
    """The regression itself: a policy's ``imitation_loss`` toward recorded chunks."""

    def __init__(self, policy: Policy, learning_rate: float, batch_size: int, image_shift: int = 4) -> None:
        self.policy, self.batch_size, self.image_shift = policy, batch_size, image_shift
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=learning_rate)

    def set_data(self, demos: Demonstrations) -> None:
        """The frames to fit: actions in the env's units, mapped into the policy's [-1, 1]."""
        spec = self.policy.spec
        check_layout(demos, spec, self.policy.chunk_size, self.policy.cameras)
        device = module_device(self.policy)
        self.states = torch.as_tensor(demos.states, device=device)
        self.images = {c: torch.as_tensor(v, device=device) for c, v in demos.images.items()}
        self.targets = torch.as_tensor(spec.action.to_unit(demos.actions), device=device)
        self.valid = torch.as_tensor(demos.action_valid, dtype=torch.float32, device=device)
        self.instruction_texts = list(demos.instructions) or [""] * len(demos)
        self.policy.update_normalizers({"state": self.states})

    def instructions(self, idx: torch.Tensor) -> list[str]:
        return [self.instruction_texts[i] for i in idx.tolist()]

    def fit(self, updates: int) -> float:
        """``updates`` Adam steps on random minibatches; returns the mean loss."""
        losses = []
        self.policy.train()
        for _ in range(updates):
            idx = torch.randint(0, len(self.states), (self.batch_size,)).to(self.states.device)
            images = {c: random_shift(v[idx], self.image_shift) for c, v in self.images.items()}
            obs = {"state": self.states[idx], "images": images, "instruction": self.instructions(idx)}
            loss = self.policy.imitation_loss(obs, self.targets[idx], self.valid[idx])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(float(loss.detach()))
        return float(np.mean(losses))


class BC:
    """Behaviour cloning of a Gaussian / tanh-Gaussian MLP or CNN policy (its mean action chunk)."""

    config_class = BCConfig

    def __init__(self, policy: Policy, cfg: BCConfig) -> None:
        self.regression = Regression(policy, cfg.learning_rate, cfg.batch_size, cfg.image_shift)
        if not cfg.dataset:
            raise ValueError("bc needs algo.dataset, a LeRobot v3 dataset folder")
        self.policy, self.cfg = policy, cfg
        selection = "interventions" if cfg.only_interventions else "all"
        try:
            demos = policy_demonstrations(policy, cfg.dataset, cfg.action_key, selection)
            if len(demos) == 0:
                raise DatasetError(describe_empty(selection, cfg.action_key))
            self.regression.set_data(demos)
        except DatasetError as exc:
            raise ValueError(f"algo.dataset={cfg.dataset!r}: {exc}") from None
        self.optimizer = self.regression.optimizer

    def iterate(self, venv: VectorEnv, seed: int) -> IterationResult:
        loss = self.regression.fit(self.cfg.updates_per_iteration)
        steps, finished = self.play_greedy(venv, seed)
        metrics = {"bc_loss": loss, "dataset_frames": len(self.regression.states)}
        return IterationResult(steps, finished, metrics)

    def play_greedy(self, venv: VectorEnv, seed: int):
        """One greedy episode per env from seeded resets: (env steps, finished episodes)."""
        return play_greedy(venv, self.policy, seed)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
