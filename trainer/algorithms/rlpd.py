"""RLPD: SAC with prior data. Every batch is half online replay, half demonstrations (symmetric
sampling); critics carry LayerNorm (an ensemble of any size, whose target takes the min over a
random pair); and the update-to-data ratio is high. Demonstrations come from a recorded dataset
(``algo.demo_dataset``: teleoperated robot episodes, as HIL-SERL starts), from the task's scripted
controller (``algo.demo_episodes``), and on robots from every step a human drove (HIL-SERL's
intervention buffer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from policies.base import ReparameterizedPolicy
from protos.batch import VectorEnv
from protos.lerobot_dataset import DatasetError
from sim_envs.scripted import scripted_policy
from sim_envs.vector import SimVectorEnv
from trainer.algorithms.demo_transitions import load_transitions
from trainer.algorithms.replay import ReplayBuffer
from trainer.algorithms.sac import SAC, SACConfig

DEMO_SEED_OFFSET = 50_000_000  # demo episodes never share seeds with training episodes


@dataclass
class RLPDConfig(SACConfig):
    utd_ratio: float = 4.0  # gradient updates per env step (RLPD learns from few steps)
    learning_starts: int = 0  # the demos are there from the start
    num_critics: int = 2  # the paper uses 10; 2 keeps CPU updates affordable (set it in the config)
    critic_subset: int = 2  # the target takes the min over a random subset of this size
    critic_layer_norm: bool = True  # LayerNorm in the critics (RLPD's)
    demo_episodes: int = 20  # scripted-controller episodes played on the envs before training
    demo_dataset: str = ""  # a LeRobot v3 dataset (e.g. teleoperated robot episodes) loaded as demos
    demo_capacity: int = 100_000  # the demo buffer's size (transitions)
    critic_hidden: list[int] = field(default_factory=lambda: [256, 256])  # the critics' layer widths


class RLPD(SAC):
    """SAC + symmetric online/demo sampling, LayerNorm critic ensemble, high UTD."""

    config_class = RLPDConfig

    def __init__(self, policy: ReparameterizedPolicy, cfg: RLPDConfig) -> None:
        super().__init__(policy, cfg)
        self.demos = ReplayBuffer(policy.spec, cfg.demo_capacity, self.cameras)
        self.interventions = 0  # human-driven robot steps added to the demos

    def buffer_metrics(self) -> dict[str, float]:
        return {
            **super().buffer_metrics(),
            "demo_size": float(len(self.demos)),
            "interventions": float(self.interventions),
        }

    def before_iteration(self, venv: VectorEnv, seed: int) -> None:
        if len(self.demos) > 0:  # already there (a resumed run's saved buffers)
            return
        if self.cfg.demo_dataset:
            self.load_demo_dataset(venv.spec)
        if self.cfg.demo_episodes > 0:
            self.collect_demos(venv)
        if len(self.demos):
            states = self.demos.data["state"][: len(self.demos)]
            self.policy.update_normalizers({"state": torch.as_tensor(states)})

    def load_demo_dataset(self, spec) -> None:
        """Every usable transition of ``algo.demo_dataset`` into the demo buffer."""
        try:
            demos = load_transitions(self.cfg.demo_dataset, spec, self.cameras)
        except DatasetError as exc:
            raise ValueError(f"algo.demo_dataset={self.cfg.demo_dataset!r}: {exc}") from None
        if len(demos) > self.cfg.demo_capacity:
            raise ValueError(
                f"algo.demo_dataset={self.cfg.demo_dataset!r} has {len(demos)} transitions, "
                f"more than algo.demo_capacity={self.cfg.demo_capacity}"
            )
        self.demos.add(demos.obs, demos.actions, demos.rewards, demos.terminated, demos.next_obs)

    def collect_demos(self, venv: VectorEnv) -> None:
        """Play the scripted controller for ``demo_episodes`` episodes into the demo buffer.

        The controller reads the privileged task state (object poses). When the policy sees only
        proprioception, the demos are played in a twin env that adds the task state, and the
        stored observations keep just the policy's own leading state fields.
        """
        demo_env, own_env = venv, True
        if "privileged_state" in venv.env_config and not venv.env_config["privileged_state"]:
            config = {**venv.env_config, "privileged_state": True}
            demo_env = SimVectorEnv(venv.env_id, venv.num_envs, backend="inline", env_config=config)
            own_env = False
        policy_fields = venv.spec.state_fields
        if demo_env.spec.state_fields[: len(policy_fields)] != policy_fields:
            raise ValueError("the policy's state fields must lead the demo env's state fields")
        state_dim = venv.spec.state_dim
        try:
            self._play_demos(demo_env, state_dim)
        finally:
            if not own_env:
                demo_env.close()

    def _play_demos(self, venv: VectorEnv, state_dim: int) -> None:
        controllers = [scripted_policy(venv.spec) for _ in range(venv.num_envs)]
        visible = lambda o: {**o, "state": o["state"][:, :state_dim]}  # noqa: E731
        for round_start in range(0, self.cfg.demo_episodes, venv.num_envs):
            obs, _ = venv.reset(seed=DEMO_SEED_OFFSET + round_start)
            for c in controllers:
                c.reset()
            for _ in range(venv.spec.max_episode_steps):
                env_actions = np.stack([c.act({"state": obs["state"][i]}) for i, c in enumerate(controllers)])
                env_actions = env_actions.astype(np.float32)
                result = venv.chunk_step(env_actions[:, None, :])
                next_obs = result.next_obs()
                unit_actions = venv.spec.action.to_unit(env_actions)
                self.demos.add(
                    visible(obs),
                    unit_actions,
                    result.rewards[:, 0],
                    result.terminated[:, 0],
                    visible(next_obs),
                )
                obs = result.obs
                if result.done.all():
                    break

    def after_step(self, obs: dict, actions: np.ndarray, result, next_obs: dict, played: np.ndarray) -> None:
        """A human's takeover on a robot is a demonstration too (HIL-SERL): it joins the demo half."""
        if result.intervened is None:
            return
        human = played[result.intervened[played, 0]]
        if len(human):
            self.demos.add(obs, actions, result.rewards[:, 0], result.terminated[:, 0], next_obs, rows=human)
            self.interventions += len(human)

    def sample_batch(self) -> dict:
        if len(self.demos) == 0:
            return self.buffer.sample(self.cfg.batch_size)
        if len(self.buffer) == 0:
            return self.demos.sample(self.cfg.batch_size)
        half = self.cfg.batch_size // 2
        online, demo = self.buffer.sample(half), self.demos.sample(self.cfg.batch_size - half)
        return _concat(online, demo)

    def save_buffers(self, directory: Path) -> None:
        super().save_buffers(directory)
        self.demos.save(directory / "demos.npz")

    def load_buffers(self, directory: Path) -> None:
        super().load_buffers(directory)
        self.demos.load(directory / "demos.npz")


def _concat(a: dict, b: dict) -> dict:
    if isinstance(a, torch.Tensor):
        return torch.cat([a, b])
    return {k: _concat(a[k], b[k]) for k in a}
