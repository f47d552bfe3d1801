"""Behaviour cloning (``--config bc``) from a LeRobot v3 dataset of scripted-expert episodes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import sim_envs
from policies import PolicyConfig, make_policy
from protos.episode_frames import vector_names
from protos.lerobot_dataset import DatasetError, EpisodeFrames, LeRobotWriter, VideoFormat
from sim_envs.scripted import play_expert
from trainer.algorithms.bc import BC, BCConfig, Regression, policy_demonstrations
from trainer.algorithms.demonstrations import chunk_targets
from trainer.configs import ConfigError, load_config
from trainer.configs.loader import algorithm_config
from trainer.runner import Runner

ENV = {"cameras": [], "action_rotation": False, "max_episode_steps": 40}


def expert_dataset(root: Path, episodes: int = 24, intervened: bool = True, env_kwargs: dict = ENV) -> Path:
    """Scripted reach episodes (seeds 10000, 10001, ...) written as LeRobot v3, every step flagged as a
    human's; cameras are recorded losslessly."""
    env = sim_envs.make("rlinf/FrankaReach-v0", **env_kwargs)
    writer = LeRobotWriter(root, fps=env.env_spec.control_hz, video=VideoFormat.lossless())
    for episode in range(episodes):
        played = play_expert(env, seed=10_000 + episode)
        n = len(played.actions)
        writer.add_episode(EpisodeFrames(
            task="reach", images=played.images,
            vectors={"observation.state": played.states, "action": played.actions},
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
    config = load_config("bc", [f"algo.dataset={dataset}", "run.total_env_steps=960", "run.final_eval_episodes=0",
                                f"run.output_dir={tmp_path / 'run'}", "env.kwargs.max_episode_steps=40"])  # fmt: skip
    Runner(config).run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and rows[-1]["train/dataset_frames"] == 24 * 40
    assert rows[-1]["train/bc_loss"] < rows[0]["train/bc_loss"]
    assert rows[-1]["success_rate"] >= baseline_success + 0.5, (baseline_success, rows[-1])


IMAGE_ENV = {**ENV, "cameras": ["front"], "image_height": 64, "image_width": 64, "privileged_state": False}


@pytest.mark.slow
def test_bc_learns_a_cnn_policy_from_the_recorded_camera(tmp_path):
    """The goal is not in the state, only in the front camera's mp4. The demonstrated episodes are
    learned (their seeds are replayed); reaching unseen goals needs more demonstrations than a test
    can afford (benchmarks/bc_image.py measures it against a state-only policy)."""
    dataset = expert_dataset(tmp_path / "ds", episodes=4, env_kwargs=IMAGE_ENV)
    config = load_config("bc_reach_image", [f"algo.dataset={dataset}", "policy.cnn_channels=[8,16,16]"])
    venv = sim_envs.make_vector("rlinf/FrankaReach-v0", 4, backend="inline", **IMAGE_ENV)
    torch.manual_seed(0)
    bc = BC(make_policy(venv.spec, config.policy), algorithm_config(config))
    assert bc.regression.images["front"].shape == (160, 64, 64, 3)
    _, before = bc.play_greedy(venv, seed=10_000)  # the demonstrations' own seeds
    first = bc.regression.fit(20)
    last = bc.regression.fit(500)
    _, after = bc.play_greedy(venv, seed=10_000)
    venv.close()
    baseline, success = np.mean([e.success for e in before]), np.mean([e.success for e in after])
    assert last < first / 5, (first, last)
    assert success >= baseline + 0.5, (baseline, success)
    # It reads the goal from the camera: each frame shown the next episode's frame of the same step
    # (another goal, the arm about where it was) is fitted worse.
    regression = bc.regression
    shown_other_goals = torch.roll(regression.images["front"], shifts=40, dims=0)
    with torch.no_grad():
        errors = [
            float(
                ((policy_mean(bc.policy, regression.states, images) - regression.targets[:, 0]) ** 2).mean()
            )
            for images in (regression.images["front"], shown_other_goals)
        ]
    assert errors[1] > 2 * errors[0], errors  # 3.1x measured; a policy blind to the camera: 1x


def policy_mean(policy, states: torch.Tensor, front: torch.Tensor) -> torch.Tensor:
    """The policy's squashed mean action for the first step, in [-1, 1]."""
    return policy.squash(
        policy.distribution(policy.encoder({"state": states, "images": {"front": front}})).mean
    )


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
    with pytest.raises(ConfigError, match=r"unknown key 'algo\.epochs' in the config \(algorithm 'bc'\)"):
        load_config("bc", ["algo.epochs=3"])


def test_a_dataset_of_another_state_layout_with_the_same_size_is_refused(tmp_path):
    """Same state size, other field names (e.g. PickColor's object state before it was per cube):
    read in the wrong layout it would train silently on the wrong values."""
    spec = sim_envs.make("rlinf/FrankaReach-v0", **ENV).env_spec
    root = expert_dataset(tmp_path / "named", episodes=1)
    info_path = root / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    names = vector_names(spec)["observation.state"]
    info["features"]["observation.state"]["names"] = names
    info_path.write_text(json.dumps(info))
    BC(make_policy(spec, PolicyConfig(value_head=False)), BCConfig(dataset=str(root)))  # its own names: fine
    at = names.index("goal_pos.0")
    info["features"]["observation.state"]["names"] = [*names[:at], "target_pos.0", *names[at + 1 :]]
    info_path.write_text(json.dumps(info))
    with pytest.raises(
        ValueError,
        match=rf"algo.dataset=.*state dimension {at} is 'target_pos.0', the env's 'goal_pos.0': .*another state",
    ):
        BC(make_policy(spec, PolicyConfig(value_head=False)), BCConfig(dataset=str(root)))


def test_chunk_targets_stop_at_episode_ends_and_where_the_human_handed_back():
    actions = np.arange(6, dtype=np.float32)[:, None]  # action t is t
    episodes = np.array([0, 0, 0, 0, 1, 1])
    human = np.array([True, True, False, True, True, True])  # the human let go at frame 2
    targets, valid = chunk_targets(actions, episodes, human, chunk_size=3)
    assert targets.shape == (6, 3, 1)
    np.testing.assert_array_equal(targets[0, :, 0], [0, 1, 2])
    np.testing.assert_array_equal(valid, [
        [True, True, False],   # frame 2 is the robot's own
        [True, False, False],  # frame 3 came after the robot's own step: not part of frame 1's chunk
        [False, False, False], # frame 2 is the robot's own: not selected at all
        [True, False, False],  # frame 4 is the next episode
        [True, True, False],   # the data ends
        [True, False, False],
    ])  # fmt: skip


def test_a_chunked_policy_fits_the_recorded_chunks(tmp_path):
    dataset = expert_dataset(tmp_path / "ds", episodes=4)
    spec = sim_envs.make("rlinf/FrankaReach-v0", **ENV).env_spec
    torch.manual_seed(0)
    policy = make_policy(spec, PolicyConfig(value_head=False, chunk_size=4))
    demos = policy_demonstrations(policy, str(dataset), "action", "all")
    assert demos.actions.shape == (160, 4, 4)
    assert not demos.action_valid[39, 1:].any() and demos.action_valid[40].all()  # episode 0 ends at 39
    np.testing.assert_array_equal(demos.actions[10, 3], demos.actions[13, 0])  # frame 10's 4th is frame 13's
    regression = Regression(policy, learning_rate=1e-3, batch_size=64)
    regression.set_data(demos)
    first = regression.fit(5)
    last = regression.fit(400)
    assert last < first / 5, (first, last)
    with torch.no_grad():
        chunk = policy.act({"state": demos.states[10:11]}, mode="greedy").actions[0].numpy()
    assert np.abs(chunk - demos.actions[10]).max() < 0.3, (chunk, demos.actions[10])
    flat = make_policy(spec, PolicyConfig(value_head=False))
    with pytest.raises(DatasetError, match="the targets are 4-step chunks, the policy's 1"):
        Regression(flat, 1e-3, 64).set_data(demos)
