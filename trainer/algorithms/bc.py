"""Behaviour cloning from a LeRobot v3 dataset, read top to bottom.

The dataset's frames (``observation.state`` and the action column ``algo.action_key``) are loaded
once. Each iteration runs ``updates_per_iteration`` regression steps on random minibatches: the
squashed mean of the policy's action distribution against the recorded action, in the policy's
[-1, 1] units. It then plays one greedy episode per env, so the run logs return and success like
every other algorithm. ``only_interventions`` keeps just the frames a human drove (HG-DAgger's
expert data). State policies only, for now.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from policies import Policy
from sim_envs.vector import SimVectorEnv
from trainer.algorithms.common import IterationResult, decisions_per_episode
from trainer.devices import module_device


@dataclass
class BCConfig:
    dataset: str = ""  # a LeRobot v3 dataset folder
    action_key: str = "action"  # the executed action; "action.human" for the human's own
    only_interventions: bool = False  # keep only the frames where a human drove
    learning_rate: float = 1e-3
    batch_size: int = 256
    updates_per_iteration: int = 200


def read_frames(root: str):
    """Every frame of a LeRobot v3 dataset (its ``data/`` parquet files) as one pandas DataFrame."""
    import pandas as pd

    files = sorted((Path(root) / "data").rglob("*.parquet"))
    if not files:
        raise ValueError(f"dataset {root!r} holds no LeRobot v3 frames (data/chunk-*/file-*.parquet)")
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)


def select_frames(frames, action_key: str, only_interventions: bool) -> tuple[np.ndarray, np.ndarray]:
    """(states [N, D], actions [N, A]) from frames; just the human-driven ones if ``only_interventions``."""
    for column in ("observation.state", action_key):
        if column not in frames.columns:
            raise ValueError(f"the dataset has no {column!r} column; it has {sorted(frames.columns)}")
    if only_interventions:
        if "intervention" not in frames.columns:
            raise ValueError("only_interventions needs the dataset's 'intervention' column")
        frames = frames[frames["intervention"].astype(bool)]
        if frames.empty:
            raise ValueError("only_interventions: the dataset has no intervened frames")
    states = np.stack(frames["observation.state"].to_numpy()).astype(np.float32)
    actions = np.stack(frames[action_key].to_numpy()).astype(np.float32)
    return states, actions


def load_frames(root: str, action_key: str, only_interventions: bool) -> tuple[np.ndarray, np.ndarray]:
    """(states [N, D], actions [N, A]) from a LeRobot v3 dataset's parquet frames."""
    return select_frames(read_frames(root), action_key, only_interventions)


class Regression:
    """The regression itself: a state policy's squashed mean action onto recorded actions."""

    def __init__(self, policy: Policy, learning_rate: float, batch_size: int) -> None:
        if policy.cfg.kind != "mlp" or policy.chunk_size != 1:
            raise ValueError(
                "bc trains state policies with one-action chunks (policy.kind=mlp, policy.chunk_size=1)"
            )
        self.policy, self.batch_size = policy, batch_size
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=learning_rate)

    def set_data(self, states: np.ndarray, actions: np.ndarray) -> None:
        """The frames to fit: actions in the env's units, mapped into the policy's [-1, 1]."""
        spec = self.policy.spec
        if states.shape[1] != spec.state_dim or actions.shape[1] != spec.action.dim:
            raise ValueError(
                f"the dataset has state {states.shape[1]} / action {actions.shape[1]}, "
                f"the env has state {spec.state_dim} / action {spec.action.dim}"
            )
        device = module_device(self.policy)
        self.states = torch.as_tensor(states, device=device)
        self.targets = torch.as_tensor(spec.action.to_unit(actions), device=device)
        self.policy.update_normalizers({"state": self.states})

    def fit(self, updates: int) -> float:
        """``updates`` Adam steps on random minibatches; returns the mean loss."""
        losses = []
        self.policy.train()
        for _ in range(updates):
            idx = torch.randint(0, len(self.states), (self.batch_size,)).to(self.states.device)
            features = self.policy.encoder({"state": self.states[idx], "images": {}})
            predicted = self.policy.squash(self.policy.distribution(features).mean)
            loss = torch.nn.functional.mse_loss(predicted, self.targets[idx])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(float(loss.detach()))
        return float(np.mean(losses))


class BC:
    """Behaviour cloning of a Gaussian / tanh-Gaussian state policy (its mean action)."""

    config_class = BCConfig

    def __init__(self, policy: Policy, cfg: BCConfig) -> None:
        self.regression = Regression(policy, cfg.learning_rate, cfg.batch_size)
        if not cfg.dataset:
            raise ValueError("bc needs algo.dataset, a LeRobot v3 dataset folder")
        self.policy, self.cfg = policy, cfg
        try:
            self.regression.set_data(*load_frames(cfg.dataset, cfg.action_key, cfg.only_interventions))
        except ValueError as exc:
            raise ValueError(f"algo.dataset={cfg.dataset!r}: {exc}") from None
        self.optimizer = self.regression.optimizer

    def iterate(self, venv: SimVectorEnv, seed: int) -> IterationResult:
        loss = self.regression.fit(self.cfg.updates_per_iteration)
        steps, finished = self.play_greedy(venv, seed)
        metrics = {"bc_mse": loss, "dataset_frames": len(self.regression.states)}
        return IterationResult(steps, finished, metrics)

    @torch.no_grad()
    def play_greedy(self, venv: SimVectorEnv, seed: int):
        """One greedy episode per env from seeded resets: (env steps, finished episodes)."""
        obs, _ = venv.reset(seed=seed)
        steps, finished = 0, []
        for _ in range(decisions_per_episode(venv, self.policy)):
            result = venv.chunk_step(self.policy.act(obs, mode="greedy").actions.cpu().numpy())
            steps += int(result.valid.sum())
            finished.extend(result.finished)
            obs = result.obs
        return steps, finished

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
