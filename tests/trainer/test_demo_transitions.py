"""A recorded dataset as RLPD's demonstrations (``algo.demo_dataset``): HIL-SERL's teleoperated start."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import sim_envs
from protos.episode_frames import vector_names
from protos.lerobot_dataset import DatasetError, EpisodeFrames, LeRobotWriter
from sim_envs.scripted import play_expert
from trainer.algorithms.demo_transitions import load_transitions
from trainer.checkpoint import latest_checkpoint
from trainer.configs import load_config
from trainer.runner import Runner

ENV = {"cameras": [], "action_rotation": False, "max_episode_steps": 30}


def reach_spec():
    env = sim_envs.make("rlinf/FrankaReach-v0", **ENV)
    spec = env.env_spec
    env.close()
    return spec


def write_episodes(root: Path, ends: list[tuple[str, bool]], seed: int = 10_000) -> list:
    """Scripted reach episodes, one per ``(end_reason, aborted)``; returns what was played."""
    env = sim_envs.make("rlinf/FrankaReach-v0", **ENV)
    spec = env.env_spec
    writer = LeRobotWriter(root, fps=spec.control_hz)
    played = []
    for i, (reason, aborted) in enumerate(ends):
        episode = play_expert(env, seed=seed + i)
        n = len(episode.actions)
        rewards = np.arange(n, dtype=np.float32) + 100 * i  # distinct per frame, to check the pairing
        writer.add_episode(EpisodeFrames(
            task="reach", images={}, vectors={"observation.state": episode.states, "action": episode.actions},
            scalars={"next.reward": rewards, "next.done": np.arange(n) == n - 1},
            extra={"end_reason": reason, "aborted": aborted}, names=vector_names(spec),
        ))  # fmt: skip
        played.append((episode, rewards))
    env.close()
    return played


def test_frames_pair_with_the_next_frame_and_only_terminated_episodes_keep_their_last(tmp_path):
    played = write_episodes(
        tmp_path / "ds", [("terminated", False), ("truncated", False), ("driver error", True)]
    )
    spec = reach_spec()
    demos = load_transitions(tmp_path / "ds", spec)
    (first, first_rewards), (second, second_rewards), _ = played
    n1, n2 = len(first.actions), len(second.actions)
    assert len(demos) == n1 + (n2 - 1)  # the truncated episode's last frame has no next; aborted is out
    assert np.array_equal(demos.rewards, np.concatenate([first_rewards, second_rewards[:-1]]))
    np.testing.assert_allclose(demos.obs["state"][:n1], first.states)
    np.testing.assert_allclose(demos.next_obs["state"][: n1 - 1], first.states[1:])
    np.testing.assert_allclose(demos.next_obs["state"][n1:], second.states[1:])
    assert demos.terminated.tolist() == [0.0] * (n1 - 1) + [1.0] + [0.0] * (n2 - 1)
    np.testing.assert_allclose(demos.actions[:n1], spec.action.to_unit(first.actions), atol=1e-6)
    assert np.abs(demos.actions).max() <= 1.0


def test_a_dataset_of_another_task_or_with_nothing_usable_is_refused_in_one_line(tmp_path):
    write_episodes(tmp_path / "reach", [("truncated", False)])
    lift = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=[], action_rotation=False)
    with pytest.raises(DatasetError, match=r"^the dataset has state \d+ / action \d+, the env has state"):
        load_transitions(tmp_path / "reach", lift.env_spec)
    lift.close()
    write_episodes(tmp_path / "aborted", [("driver error", True)])
    with pytest.raises(DatasetError, match="no usable transitions"):
        load_transitions(tmp_path / "aborted", reach_spec())
    with pytest.raises(DatasetError, match=r"not a LeRobot v3 dataset|holds no LeRobot v3 frames"):
        load_transitions(tmp_path / "missing", reach_spec())


def test_rlpd_starts_from_the_dataset_instead_of_the_scripted_controller(tmp_path):
    played = write_episodes(tmp_path / "ds", [("terminated", False), ("terminated", False)])
    overrides = [f"run.output_dir={tmp_path / 'run'}", "algorithm=rlpd", f"algo.demo_dataset={tmp_path / 'ds'}",
                 "algo.demo_episodes=0", "algo.learning_starts=0", "algo.utd_ratio=0.1", "algo.batch_size=16",
                 "run.total_env_steps=120", "run.final_eval_episodes=0", "run.eval_every=100",
                 "env.num_envs=2", "env.kwargs.max_episode_steps=30", "policy.hidden_sizes=[32]",
                 "algo.critic_hidden=[32]"]  # fmt: skip
    Runner(load_config("sac_reach", overrides)).run()
    demos = np.load(latest_checkpoint(tmp_path / "run") / "demos.npz")
    # The dataset's transitions, in order, and no scripted episode after them.
    assert np.array_equal(demos["reward"], np.concatenate([rewards for _, rewards in played]))
    np.testing.assert_allclose(demos["state"], np.concatenate([episode.states for episode, _ in played]))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["train/demo_size"] == len(demos["reward"])


def test_rlpd_names_the_bad_demo_dataset(tmp_path):
    write_episodes(tmp_path / "ds", [("truncated", False)])
    overrides = [f"run.output_dir={tmp_path / 'run'}", "algorithm=rlpd", f"algo.demo_dataset={tmp_path / 'ds'}",
                 "algo.demo_episodes=0", "env.id=rlinf/FrankaPickLift-v0", "env.num_envs=1"]  # fmt: skip
    with pytest.raises(ValueError, match=r"^algo.demo_dataset=.*: the dataset has state"):
        Runner(load_config("sac_reach", overrides)).run()
