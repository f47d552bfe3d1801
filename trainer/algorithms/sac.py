"""SAC: twin (or ensemble) Q critics, a tanh-Gaussian actor and an auto-tuned temperature.

One iteration plays one episode per env from seeded resets. Each vector step adds N transitions
to the replay buffer and then runs ``N * utd_ratio`` gradient updates. With images, the policy's
encoder is trained through the critic loss, the actor sees detached features, and both images
of a transition get a random shift (DrQ).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from policies.base import ReparameterizedPolicy
from protos.batch import VectorEnv
from trainer.algorithms.common import IterationResult, decisions_per_episode, random_shift
from trainer.algorithms.critics import QEnsemble
from trainer.algorithms.replay import ReplayBuffer
from trainer.devices import module_device, tree_to


@dataclass
class SACConfig:
    actor_learning_rate: float = 3e-4  # the actor's Adam step size
    critic_learning_rate: float = 3e-4  # the critics' Adam step size
    gamma: float = 0.99  # discount
    tau: float = 0.005  # target critics' Polyak rate
    batch_size: int = 256  # transitions per update
    buffer_capacity: int = 300_000  # replay buffer size (transitions)
    learning_starts: int = 2_000  # env steps of uniform random actions before learning
    utd_ratio: float = 0.5  # gradient updates per env step
    init_temperature: float = 0.1  # the entropy temperature's start
    target_entropy_scale: float = 1.0  # target entropy = -scale * action_dim
    num_critics: int = 2  # Q-functions in the ensemble
    critic_subset: int = 2  # the target takes the min over a random subset of this size
    critic_layer_norm: bool = False  # LayerNorm in the critics
    critic_hidden: list[int] = field(default_factory=lambda: [256, 256])  # the critics' layer widths
    image_shift: int = 4  # DrQ random shift in pixels, 0 disables


def mean_stats(stats: list[dict[str, float]]) -> dict[str, float]:
    """Each key's mean over the updates of an iteration (empty before learning starts)."""
    return {k: float(np.mean([s[k] for s in stats])) for k in stats[0]} if stats else {}


class SAC:
    """Soft actor-critic on a ``tanh_gaussian`` policy."""

    config_class = SACConfig

    def __init__(self, policy: ReparameterizedPolicy, cfg: SACConfig) -> None:
        if not policy.reparameterized:
            raise ValueError(
                f"{type(self).__name__} needs a policy with reparameterised actions "
                f"(policy.head=tanh_gaussian); {type(policy).__name__} here has none"
            )
        if policy.chunk_size != 1:
            raise ValueError(f"{type(self).__name__} needs policy.chunk_size=1, got {policy.chunk_size}")
        if cfg.critic_subset > cfg.num_critics:
            raise ValueError(
                f"algo.critic_subset ({cfg.critic_subset}) exceeds algo.num_critics ({cfg.num_critics})"
            )
        self.policy, self.cfg = policy, cfg
        self.cameras = policy.cameras
        action_dim = policy.spec.action.dim
        feature_dim = policy.feature_encoder.out_dim
        self.device = module_device(policy)  # critics, temperature and sampled batches live there too
        self.critic = QEnsemble(
            feature_dim + action_dim, cfg.critic_hidden, cfg.num_critics, cfg.critic_layer_norm
        ).to(self.device)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_encoder = copy.deepcopy(policy.feature_encoder).requires_grad_(False)
        self.log_alpha = torch.tensor(
            float(np.log(cfg.init_temperature)), device=self.device, requires_grad=True
        )
        self.target_entropy = -cfg.target_entropy_scale * action_dim
        self.actor_optimizer = torch.optim.Adam(policy.actor_parameters(), lr=cfg.actor_learning_rate)
        self.critic_optimizer = torch.optim.Adam(
            [*self.critic.parameters(), *policy.feature_encoder.parameters()], lr=cfg.critic_learning_rate
        )
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.actor_learning_rate)
        self.buffer = ReplayBuffer(policy.spec, cfg.buffer_capacity, self.cameras)
        self.env_steps = 0
        self.pending_updates = 0.0
        self.source_weights: np.ndarray | None = None  # [N] per-env training weight (sim + robot pools)

    # -- acting ------------------------------------------------------------------------------------
    def iterate(self, venv: VectorEnv, seed: int) -> IterationResult:
        self.before_iteration(venv, seed)
        self.source_weights = getattr(venv, "source_weights", None)
        obs, _ = venv.reset(seed=seed)
        finished, stats, steps = [], [], 0
        episode_rows: list[list[int]] = [[] for _ in range(venv.num_envs)]  # buffer rows per env's episode
        for _ in range(decisions_per_episode(venv, self.policy)):
            unit_actions = self.explore(obs)
            result = venv.chunk_step(self.policy.to_env_units(unit_actions).cpu().numpy()[:, None, :])
            steps += self.observe(obs, unit_actions.cpu().numpy(), result, episode_rows)
            finished.extend(result.finished)
            obs = result.obs
            while self.pending_updates >= 1.0:
                stats.append(self.update())
                self.pending_updates -= 1.0
        metrics = {**mean_stats(stats), **self.buffer_metrics(), "policy_lag": 0.0}
        return IterationResult(steps, finished, metrics)

    def buffer_metrics(self) -> dict[str, float]:
        return {"buffer_size": float(len(self.buffer))}

    def observe(self, obs: dict, unit_actions: np.ndarray, result, episode_rows: list[list[int]]) -> int:
        """Store one vector step's transitions and owe ``utd_ratio`` updates per env step (once
        learning has started). ``episode_rows`` tracks each env's rows of its running episode, so a
        robot episode that was aborted can be dropped. Returns the env steps played."""
        played = np.flatnonzero(result.valid[:, 0])  # a dead robot slot plays nothing
        actions, next_obs = self.executed_units(result, unit_actions), result.next_obs()
        written = self.buffer.add(
            obs, actions, result.rewards[:, 0], result.terminated[:, 0], next_obs, rows=played,
            weights=self.source_weights,
        )  # fmt: skip
        self.after_step(obs, actions, result, next_obs, played)
        for env, row in zip(played, written):
            episode_rows[env].append(int(row))
        for env in result.aborted:  # a robot dropped: its whole episode is unusable
            self.buffer.discard(episode_rows[env])
        for env in [*np.flatnonzero(result.done), *result.aborted]:
            episode_rows[env] = []
        self.env_steps += len(played)
        if self.env_steps >= self.cfg.learning_starts:
            self.pending_updates += len(played) * self.cfg.utd_ratio
        return len(played)

    def before_iteration(self, venv: VectorEnv, seed: int) -> None:
        """Hook for subclasses (RLPD loads its demonstrations here)."""

    def after_step(self, obs: dict, actions: np.ndarray, result, next_obs: dict, played: np.ndarray) -> None:
        """Hook for subclasses (RLPD keeps human interventions as demonstrations)."""

    def executed_units(self, result, unit_actions: np.ndarray) -> np.ndarray:
        """The actions that really ran, in [-1, 1]: a robot's human takeover or safety scaling replaces
        the policy's sample, so the transition stored is the one that happened."""
        if result.executed is None:
            return unit_actions
        return self.policy.spec.action.to_unit(result.executed[:, 0])

    @torch.no_grad()
    def explore(self, obs: dict) -> torch.Tensor:
        """Actions in [-1, 1]: uniform until ``learning_starts``, then the policy's samples."""
        n = obs["state"].shape[0]
        if self.env_steps < self.cfg.learning_starts:
            self.policy.update_normalizers(obs)  # statistics settle during warm-up, then stay fixed
            return torch.rand(n, self.policy.spec.action.dim) * 2.0 - 1.0
        unit_actions, _ = self.policy.rsample(obs)
        return unit_actions

    # -- learning ----------------------------------------------------------------------------------
    def sample_batch(self) -> dict:
        return self.buffer.sample(self.cfg.batch_size)

    def _augment(self, obs: dict) -> dict:
        if not self.cameras:
            return obs
        return {**obs, "images": {k: random_shift(v, self.cfg.image_shift) for k, v in obs["images"].items()}}

    def update(self) -> dict[str, float]:
        cfg, policy = self.cfg, self.policy
        batch = tree_to(self.sample_batch(), self.device)
        obs, next_obs = self._augment(batch["obs"]), self._augment(batch["next_obs"])
        alpha = self.log_alpha.exp().detach()

        with torch.no_grad():
            next_features = policy.feature_encoder(next_obs)
            next_actions, next_log_prob = policy.rsample(None, features=next_features)
            target_q = self.target_critic(self.target_encoder(next_obs), next_actions)
            subset = torch.randperm(cfg.num_critics)[: cfg.critic_subset].to(self.device)
            next_value = target_q[subset].min(0).values - alpha * next_log_prob
            target = batch["reward"] + cfg.gamma * (1.0 - batch["terminated"]) * next_value

        # Each transition weighs as its source does (a sim + robot pool's sim_weight / robot_weight).
        weight = batch["weight"] / batch["weight"].mean().clamp_min(1e-8)
        features = policy.feature_encoder(obs)
        q = self.critic(features, batch["action"])
        critic_loss = 0.5 * ((q - target.unsqueeze(0)) ** 2 * weight).mean(1).sum()
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()

        features = features.detach()
        actions, log_prob = policy.rsample(None, features=features)
        q_pi = self.critic(features, actions).mean(0)
        actor_loss = ((alpha * log_prob - q_pi) * weight).mean()
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()

        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy) * weight).mean()
        self.alpha_optimizer.zero_grad()
        alpha_loss.backward()
        self.alpha_optimizer.step()

        self._soft_update()
        return {
            "critic_loss": float(critic_loss.detach()),
            "actor_loss": float(actor_loss.detach()),
            "alpha": float(alpha),
            "entropy": float(-log_prob.detach().mean()),
            "q_mean": float(q.detach().mean()),
        }

    @torch.no_grad()
    def _soft_update(self) -> None:
        tau = self.cfg.tau
        for target, source in (
            (self.target_critic, self.critic),
            (self.target_encoder, self.policy.feature_encoder),
        ):
            for t, s in zip(target.parameters(), source.parameters()):
                t.lerp_(s, tau)
            for t, s in zip(target.buffers(), source.buffers()):
                t.copy_(s)

    # -- checkpointing -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "critic": self.critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "target_encoder": self.target_encoder.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "env_steps": self.env_steps,
            "pending_updates": self.pending_updates,
        }

    def load_state_dict(self, state: dict) -> None:
        self.critic.load_state_dict(state["critic"])
        self.target_critic.load_state_dict(state["target_critic"])
        self.target_encoder.load_state_dict(state["target_encoder"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.env_steps = state["env_steps"]
        self.pending_updates = state["pending_updates"]

    def save_buffers(self, directory: Path) -> None:
        self.buffer.save(directory / "replay.npz")

    def load_buffers(self, directory: Path) -> None:
        self.buffer.load(directory / "replay.npz")
