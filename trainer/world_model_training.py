"""Training a world model (``rlinf-trainer train --config world_model``), read top to bottom.

1. Recorded LeRobot v3 episodes give, per frame, the state, the camera frames, the executed action
   (in the policy's [-1, 1] units), ``next.reward`` and ``next.success``.
2. Training rolls every ensemble member ``horizon`` steps open loop from a recorded frame and
   compares each step with the recording: next state (normalised), the next latent against the
   encoder's latent of the real next frame, and the decoded frames against the real ones; reward and
   success are judged from the real next observation (success frames class-balanced).
3. Whole episodes are held out. The validation error of 1, 5 and 20-step open-loop rollouts (state, in
   normalised units, and frames) is written to ``metrics.json`` with a copy-the-last-observation
   baseline and the members' disagreement quantiles (the env's halting scale), and ``rollout.gif``
   shows a held-out episode side by side (real | predicted).
4. The model is saved as ``<run>/world_model/`` with ``starts.npz``, the recorded frames the
   world-model env resets from (every first frame, and others for ``start_from="any"``), and
   whether the recorded env ended episodes at their first success.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from policies.world_model.env import STARTS_FILE
from policies.world_model.model import WorldModel, WorldModelConfig
from protos import EnvSpec
from protos.lerobot_dataset import DatasetError
from trainer.configs.errors import ConfigError

HORIZONS = (1, 5, 20)
MAX_START_FRAMES = 20_000  # recorded frames an imagined episode may start from (state only)
MAX_START_FRAMES_WITH_IMAGES = 2_000


@dataclass
class WorldModelTrainConfig:
    dataset: str = ""  # a LeRobot v3 dataset folder (sim, twin or robot episodes)
    cameras: list[str] = field(default_factory=list)
    horizon: int = 5  # open-loop steps per training sequence
    updates: int = 2000
    batch_size: int = 64
    learning_rate: float = 1e-3
    holdout_fraction: float = 0.2
    latent_dim: int = 64
    hidden: int = 256
    image_weight: float = 1.0
    ensemble: int = 5  # dynamics members (their disagreement halts imagined episodes off the data)


class WorldModelTraining:
    """Supervised, not an RL algorithm: ``rlinf-trainer train`` runs :func:`train_world_model`."""

    config_class = WorldModelTrainConfig
    standalone = True


@dataclass
class Episodes:
    states: torch.Tensor  # [N, D]
    actions: torch.Tensor  # [N, A] in [-1, 1]
    rewards: torch.Tensor  # [N]
    success: torch.Tensor  # [N]
    images: dict[str, torch.Tensor]  # camera -> uint8 [N, H, W, 3]
    episodes: np.ndarray  # [N] episode index of each frame
    task: str

    def to(self, device: torch.device) -> Episodes:
        """The frames on ``device`` (the model trains where its data is)."""
        return replace(
            self,
            states=self.states.to(device),
            actions=self.actions.to(device),
            rewards=self.rewards.to(device),
            success=self.success.to(device),
            images={c: v.to(device) for c, v in self.images.items()},
        )

    def terminates_on_success(self) -> bool:
        """Whether the recorded env ended episodes at their first success frame (True when no
        episode succeeded): an imagined episode should end where a real one would."""
        ends, success = [], self.success.cpu().numpy()  # one copy off the device, not one per episode
        for episode in np.unique(self.episodes):
            won = np.flatnonzero(success[self.episodes == episode] > 0.5)
            if len(won):
                ends.append(won[0] == int((self.episodes == episode).sum()) - 1)
        return all(ends)

    def starts(self, length: int, episodes: np.ndarray) -> np.ndarray:
        """Frames t of the given episodes whose next ``length`` frames are in the same episode."""
        n = len(self.episodes)
        t = np.arange(n - length)
        same = self.episodes[t] == self.episodes[t + length]
        return t[same & np.isin(self.episodes[t], episodes)]


def load_episodes(cfg: WorldModelTrainConfig, spec: EnvSpec) -> Episodes:
    from protos.lerobot_reader import read_camera, read_frames, read_tasks

    frames = read_frames(cfg.dataset)
    for column in ("observation.state", "action", "next.reward"):
        if column not in frames.columns:
            raise DatasetError(f"it has no {column!r} column")
    states = np.stack(frames["observation.state"].to_numpy()).astype(np.float32)
    actions = np.stack(frames["action"].to_numpy()).astype(np.float32)
    if states.shape[1] != spec.state_dim or actions.shape[1] != spec.action.dim:
        raise DatasetError(
            f"it has state {states.shape[1]} / action {actions.shape[1]}, the env {spec.state_dim} / {spec.action.dim}"
        )
    episodes = frames["episode_index"].to_numpy()
    if len(np.unique(episodes)) < 2:
        raise DatasetError("it needs at least 2 episodes (one is held out)")
    success = frames["next.success"].to_numpy() if "next.success" in frames.columns else np.zeros(len(frames))
    images = {}
    for camera in cfg.cameras:
        per_episode = read_camera(cfg.dataset, camera, np.unique(episodes))
        images[camera] = torch.as_tensor(
            np.stack([per_episode[e][t] for e, t in zip(episodes, frames["frame_index"].to_numpy())])
        )
    tasks = read_tasks(cfg.dataset)
    return Episodes(
        torch.as_tensor(states),
        torch.as_tensor(spec.action.to_unit(actions)),
        torch.as_tensor(frames["next.reward"].to_numpy().astype(np.float32)),
        torch.as_tensor(success.astype(np.float32)),
        images,
        episodes,
        next(iter(tasks.values()), spec.instruction),
    )


def rollout_losses(
    model: WorldModel,
    data: Episodes,
    starts: np.ndarray,
    horizon: int,
    image_weight: float,
    success_weight: float = 1.0,
):
    """The open-loop training loss of ``horizon`` steps from each start frame: every ensemble member
    rolls out on its own; reward and success are judged from the real next observation (success
    frames weighted by ``success_weight``: they are rare, often one per successful episode)."""
    images = {c: v[starts] for c, v in data.images.items()}
    z = model.encode(images) if images else data.states.new_zeros(len(starts), 0)
    state = model.normalize(data.states[starts])
    loss = data.states.new_zeros(())
    if images:  # the autoencoder: the decoder must render the encoded frame
        decoded = model.decode(z)
        loss = loss + image_weight * sum(((decoded[c] - images[c].float() / 255) ** 2).mean() for c in images)
    weights = model.member_weights()  # stacked once for the whole rollout
    for k in range(horizon):
        now, nxt = starts + k, starts + k + 1
        z, state = model.members_step(z, state, data.actions[now], weights)  # [M, B, ...]
        target_state = model.normalize(data.states[nxt])
        loss = loss + ((state - target_state) ** 2).mean(dim=(1, 2)).sum()
        real = {c: v[nxt] for c, v in data.images.items()}
        target_z = model.encode(real) if images else z.new_zeros(len(starts), 0)
        reward, success_logit = model.judge(target_z, target_state)
        loss = loss + ((reward - data.rewards[now]) ** 2).mean()
        loss = loss + torch.nn.functional.binary_cross_entropy_with_logits(
            success_logit, data.success[now], pos_weight=data.success.new_tensor(success_weight)
        )
        if images:
            loss = loss + ((z - target_z.detach()) ** 2).mean(dim=(1, 2)).sum()
            predicted = model.decode(z.mean(0))
            loss = loss + image_weight * sum(
                ((predicted[c] - real[c].float() / 255) ** 2).mean() for c in real
            )
    return loss / horizon


@torch.no_grad()
def open_loop_errors(model: WorldModel, data: Episodes, episodes: np.ndarray) -> dict[str, float]:
    """Per horizon: state error (normalised MSE) and frame error (MSE in [0, 1]) of the model and
    of copying the last observation."""
    out = {}
    for h in HORIZONS:
        starts = data.starts(h, episodes)
        if len(starts) == 0:
            continue
        images = {c: v[starts] for c, v in data.images.items()}
        z = model.encode(images) if images else data.states.new_zeros(len(starts), 0)
        state = model.normalize(data.states[starts])
        first = state
        for k in range(h):
            step = model.step(z, state, data.actions[starts + k])
            z, state = step.latent, step.state
        target = model.normalize(data.states[starts + h])
        out[f"state_error_{h}"] = float(((state - target) ** 2).mean())
        out[f"state_error_copy_last_{h}"] = float(((first - target) ** 2).mean())
        if images:
            predicted = model.decode(z)
            real = {c: v[starts + h].float() / 255 for c, v in data.images.items()}
            out[f"frame_error_{h}"] = float(
                np.mean([float(((predicted[c] - real[c]) ** 2).mean()) for c in real])
            )
            out[f"frame_error_copy_last_{h}"] = float(
                np.mean([float(((images[c].float() / 255 - real[c]) ** 2).mean()) for c in real])
            )
    return out


@torch.no_grad()
def held_out_disagreement(model: WorldModel, data: Episodes, episodes: np.ndarray) -> dict[str, float]:
    """Quantiles of the members' disagreement along held-out open-loop rollouts (up to 20 steps):
    the scale of "within the data" that the world-model env halts episodes against."""
    h = max(HORIZONS)
    starts = data.starts(1, episodes)
    images = {c: v[starts] for c, v in data.images.items()}
    z = model.encode(images) if images else data.states.new_zeros(len(starts), 0)
    state = model.normalize(data.states[starts])
    seen = []
    for k in range(h):
        live = data.episodes[np.minimum(starts + k + 1, len(data.episodes) - 1)] == data.episodes[starts]
        live &= starts + k + 1 < len(data.episodes)
        if not live.any():
            break
        step = model.step(z, state, data.actions[np.minimum(starts + k, len(data.actions) - 1)])
        seen.append(step.disagreement[torch.as_tensor(live, device=step.disagreement.device)])
        z, state = step.latent, step.state
    values = torch.cat(seen).cpu().numpy()
    return {f"p{q}": float(np.percentile(values, q)) for q in (50, 95, 99)}


@torch.no_grad()
def side_by_side(model: WorldModel, data: Episodes, episode: int, path: Path, steps: int = 40) -> None:
    """A GIF of one episode's first camera: the recording | the model's open-loop prediction."""
    import imageio.v2 as imageio

    if not model.cfg.cameras:
        return
    camera = model.cfg.cameras[0]
    frames = np.flatnonzero(data.episodes == episode)[: steps + 1]
    z = model.encode({c: v[frames[:1]] for c, v in data.images.items()})
    state = model.normalize(data.states[frames[:1]])
    out = []
    for k, index in enumerate(frames):
        predicted = (model.decode(z)[camera][0].cpu().numpy() * 255).astype(np.uint8)
        out.append(np.concatenate([data.images[camera][index].cpu().numpy(), predicted], axis=1))
        if k + 1 < len(frames):
            step = model.step(z, state, data.actions[index : index + 1])
            z, state = step.latent, step.state
    imageio.mimsave(path, out, duration=0.1, loop=0)


def train_world_model(
    cfg: WorldModelTrainConfig,
    spec: EnvSpec,
    run_dir: Path,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> dict:
    """Fit on ``device`` (``run.device``), validate on held-out episodes, save
    ``<run_dir>/world_model`` (CPU tensors: it loads anywhere); returns the metrics."""
    if not cfg.dataset:
        raise ConfigError("world_model needs algo.dataset, a LeRobot v3 dataset folder")
    try:
        data = load_episodes(cfg, spec)
    except DatasetError as exc:
        raise ConfigError(f"algo.dataset={cfg.dataset!r}: {exc}") from None
    device = torch.device(device)
    data = data.to(device)
    torch.manual_seed(seed)
    model = WorldModel(
        spec, WorldModelConfig(list(cfg.cameras), cfg.latent_dim, cfg.hidden, ensemble=cfg.ensemble)
    ).to(device)
    unique = np.unique(data.episodes)
    held = unique[len(unique) - max(1, round(cfg.holdout_fraction * len(unique))) :]
    train_episodes = np.setdiff1d(unique, held)
    model.state_norm.update(
        data.states[torch.as_tensor(np.isin(data.episodes, train_episodes), device=device)]
    )
    starts = data.starts(cfg.horizon, train_episodes)
    if len(starts) == 0:
        raise ConfigError(
            f"algo.dataset={cfg.dataset!r}: no training episode is longer than algo.horizon={cfg.horizon}"
        )
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    positives = float(data.success.cpu()[torch.as_tensor(np.isin(data.episodes, train_episodes))].sum())
    # Balance the success classes, up to 100x: one success frame per episode against dozens without.
    success_weight = float(np.clip((len(data.success) - positives) / max(positives, 1.0), 1.0, 100.0))
    losses = []
    for _ in tqdm(range(cfg.updates), desc="world model", unit="update"):
        batch = starts[np.random.randint(0, len(starts), cfg.batch_size)]
        loss = rollout_losses(model, data, batch, cfg.horizon, cfg.image_weight, success_weight)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    model.eval()
    disagreement = held_out_disagreement(model, data, held)
    metrics = {
        **open_loop_errors(model, data, held),
        **{f"disagreement_{k}": v for k, v in disagreement.items()},
        "held_out_episodes": len(held),
        "loss_first": float(np.mean(losses[: max(1, len(losses) // 10)])),
        "loss_last": float(np.mean(losses[-max(1, len(losses) // 10) :])),
    }
    out = run_dir / "world_model"
    first = np.r_[True, data.episodes[1:] != data.episodes[:-1]]
    # Reset frames: every first frame, and evenly spread others (for start_from="any"), capped so
    # camera frames stay a few hundred MB at most.
    cap = MAX_START_FRAMES_WITH_IMAGES if data.images else MAX_START_FRAMES
    spread = np.linspace(0, len(first) - 1, min(cap, len(first))).astype(int)
    rows = np.union1d(np.flatnonzero(first), spread)
    starts_arrays = {"state": data.states[rows].cpu().numpy(), "first": first[rows],
                     **{f"image.{c}": v[rows].cpu().numpy() for c, v in data.images.items()}}  # fmt: skip
    model.save(
        out,
        extra={
            "task": data.task,
            "disagreement": disagreement,
            "terminates_on_success": data.terminates_on_success(),
        },
        files={STARTS_FILE: lambda f: np.savez(f, **starts_arrays)},
    )
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    side_by_side(model, data, int(held[0]), run_dir / "rollout.gif")
    return metrics
