"""Behaviour cloning (``--config bc``) from a LeRobot v3 dataset of scripted-expert episodes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import sim_envs
from policies import PolicyConfig, make_policy
from protos.lerobot_dataset import EpisodeFrames, LeRobotWriter
from sim_envs.scripted import scripted_policy
from trainer.algorithms.bc import BC, BCConfig
from trainer.configs import ConfigError, load_config
from trainer.runner import Runner

ENV = {"cameras": [], "action_rotation": False, "max_episode_steps": 40}


def expert_dataset(root: Path, episodes: int = 24, intervened: bool = True) -> Path:
    """Scripted reach episodes written as LeRobot v3 (every step flagged as a human's)."""
    env = sim_envs.make("rlinf/FrankaReach-v0", **ENV)
    writer = LeRobotWriter(root, fps=env.env_spec.control_hz)
    expert = scripted_policy(env.env_spec)
    for episode in range(episodes):
        obs, _ = env.reset(seed=10_000 + episode)
        expert.reset()
        states, actions = [], []
        for _ in range(env.env_spec.max_episode_steps):
            action = expert.act(obs).astype(np.float32)
            states.append(obs["state"])
            actions.append(action)
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        n = len(actions)
        writer.add_episode(EpisodeFrames(
            task="reach", images={},
            vectors={"observation.state": np.stack(states), "action": np.stack(actions)},
            scalars={"intervention": np.full(n, intervened), "next.done": np.arange(n) == n - 1},
        ))  # fmt: skip
    env.close()
    return root


def test_bc_learns_to_reach_from_expert_episodes(tmp_path):
    dataset = expert_dataset(tmp_path / "ds")
    run_seed_iteration0 = 0  # run.seed 0, iteration 0: the seeds the first evaluation plays
    venv = sim_envs.make_vector("rlinf/FrankaReach-v0", 8, backend="inline", **ENV)
    torch.manual_seed(0)
    untrained = BC(make_policy(venv.spec, PolicyConfig(value_head=False)), BCConfig(dataset=str(dataset)))
    _, baseline = untrained.play_greedy(venv, seed=run_seed_iteration0)
    venv.close()
    baseline_success = float(np.mean([e.success for e in baseline]))
    config = load_config("bc", [f"algo.dataset={dataset}", "run.total_env_steps=960",
                                f"run.output_dir={tmp_path / 'run'}", "env.kwargs.max_episode_steps=40"])  # fmt: skip
    Runner(config).run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and rows[-1]["train/dataset_frames"] == 24 * 40
    assert rows[-1]["train/bc_mse"] < rows[0]["train/bc_mse"]
    assert rows[-1]["success_rate"] >= baseline_success + 0.5, (baseline_success, rows[-1])


def test_only_interventions_and_bad_datasets_are_explained(tmp_path):
    spec = sim_envs.make("rlinf/FrankaReach-v0", **ENV).env_spec
    policy = make_policy(spec, PolicyConfig(value_head=False))
    no_human = expert_dataset(tmp_path / "auto", episodes=1, intervened=False)
    with pytest.raises(ValueError, match="no intervened frames"):
        BC(policy, BCConfig(dataset=str(no_human), only_interventions=True))
    with pytest.raises(ValueError, match="holds no LeRobot v3 frames"):
        BC(policy, BCConfig(dataset=str(tmp_path / "empty")))
    with pytest.raises(ValueError, match=r"needs algo\.dataset"):
        BC(policy, BCConfig())
    other = make_policy(
        sim_envs.make("rlinf/FrankaReach-v0", cameras=[]).env_spec, PolicyConfig(value_head=False)
    )
    with pytest.raises(
        ValueError, match="the dataset has state 28 / action 4, the env has state 28 / action 7"
    ):
        BC(other, BCConfig(dataset=str(no_human)))
    with pytest.raises(ConfigError, match=r"unknown config key 'algo\.epochs'"):
        load_config("bc", ["algo.epochs=3"])
