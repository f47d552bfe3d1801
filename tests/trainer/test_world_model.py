"""A world model from recorded episodes: it fits them better than copying the last observation, its
env keeps the vector-env contract, and PPO runs inside it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import sim_envs
from policies.world_model.env import WorldModelVectorEnv
from trainer.configs import load_config
from trainer.expert_demos import DemoConfig, record_expert_demos
from trainer.runner import Runner, make_sim_envs
from trainer.world_model_training import WorldModelTrainConfig, train_world_model

STATE_ENV = {"cameras": [], "privileged_state": True, "action_rotation": False, "max_episode_steps": 30}


@pytest.fixture(scope="module")
def state_model(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("wm")
    demos = record_expert_demos(DemoConfig("rlinf/FrankaReach-v0", 8, str(root / "demos"), seed=0,
                                           only_successful=False, env_kwargs=STATE_ENV), progress=False)  # fmt: skip
    spec = sim_envs.make("rlinf/FrankaReach-v0", **STATE_ENV).env_spec
    cfg = WorldModelTrainConfig(dataset=str(demos.root), updates=600, batch_size=64, hidden=128)
    return root / "run", train_world_model(cfg, spec, root / "run")


def test_open_loop_rollouts_beat_copying_the_last_state(state_model):
    _, metrics = state_model
    assert metrics["loss_last"] < 0.5 * metrics["loss_first"]
    for horizon in (5, 20):  # held-out episodes: the model, not a memory of them
        assert metrics[f"state_error_{horizon}"] < 0.7 * metrics[f"state_error_copy_last_{horizon}"], metrics


def test_the_world_model_env_keeps_the_vector_env_contract(state_model):
    run, _ = state_model
    venv = WorldModelVectorEnv(
        str(run / "world_model"), num_envs=4, max_episode_steps=6, terminate_on_success=False
    )
    assert venv.spec.name == "rlinf/WorldModel-v0" and venv.spec.instruction.startswith("move the gripper")
    first, _ = venv.reset(seed=3)
    again, _ = venv.reset(seed=3)
    np.testing.assert_allclose(first["state"], again["state"])  # resets are drawn by the seed
    assert first["state"].shape == (4, venv.spec.state_dim) and len(first["instruction"]) == 4
    result = venv.chunk_step(np.zeros((4, 4, venv.spec.action.dim), np.float32))
    assert result.rewards.shape == (4, 4) and result.valid.all() and not result.done.any()
    result = venv.chunk_step(np.zeros((4, 4, venv.spec.action.dim), np.float32))
    assert result.truncated[:, 1].all() and not result.valid[:, 2:].any()  # 6 steps, then a reset
    assert len(result.finished) == 4 and all(e.length == 6 for e in result.finished)
    assert all(f is not None for f in result.final_obs)


def test_imagined_episodes_halt_where_the_ensemble_disagrees(state_model):
    """Far from the recorded data the members disagree; the env ends such an episode with a penalty
    (not a success) instead of letting a policy exploit what the model gets wrong there."""
    import torch

    run, metrics = state_model
    assert 0 < metrics["disagreement_p50"] <= metrics["disagreement_p99"]

    def env(**kwargs) -> WorldModelVectorEnv:
        venv = WorldModelVectorEnv(str(run / "world_model"), num_envs=4, max_episode_steps=10,
                                   terminate_on_success=False, **kwargs)  # fmt: skip
        venv.reset(seed=0)
        return venv

    venv = env()
    zeros = np.zeros((4, 1, venv.spec.action.dim), np.float32)
    unit_zeros = torch.zeros(4, venv.spec.action.dim)
    with torch.no_grad():
        near = venv.model.step(venv.z, venv.state, unit_zeros).disagreement
        far_state = venv.state + 20.0  # 20 standard deviations from every recorded state
        far = venv.model.step(venv.z, far_state, unit_zeros).disagreement
    assert (near < venv.halt_above).all() and (far > venv.halt_above).all(), (near, far, venv.halt_above)
    assert not venv.chunk_step(zeros).terminated.any()  # a recorded start and a still arm: it goes on
    venv.state = far_state
    result = venv.chunk_step(zeros)
    assert result.terminated[:, 0].all() and not result.success.any() and venv.halted == 4
    np.testing.assert_allclose(result.rewards[:, 0], -venv.halt_penalty)
    assert all(not e.success for e in result.finished)
    never = env(halt_multiple=0.0)  # halting off: the same step just goes on
    never.state = far_state
    assert not never.chunk_step(zeros).terminated.any() and never.halted == 0


def test_imagined_episodes_end_on_success_only_where_recorded_ones_did(state_model):
    """A task that runs on after success (Franka reach: holding the goal pays every step) must not
    end imagined episodes at the first success, which would make succeeding cost return."""
    import torch

    from trainer.world_model_training import Episodes

    run, _ = state_model
    header = json.loads((run / "world_model" / "world_model.json").read_text())
    assert header["terminates_on_success"] is False
    assert WorldModelVectorEnv(str(run / "world_model"), 1).terminate_on_success is False
    assert WorldModelVectorEnv(str(run / "world_model"), 1, terminate_on_success=True).terminate_on_success

    def episodes(success: list[float], index: list[int]) -> Episodes:
        n = len(success)
        return Episodes(torch.zeros(n, 1), torch.zeros(n, 1), torch.zeros(n), torch.tensor(success), {},
                        np.array(index), "")  # fmt: skip

    assert episodes([0, 0, 1, 0, 0], [0, 0, 0, 1, 1]).terminates_on_success()  # ends at its success
    assert not episodes([0, 1, 1, 0, 0], [0, 0, 0, 1, 1]).terminates_on_success()  # runs on after it


def test_the_sparse_reward_pays_exactly_the_predicted_successes(state_model):
    """``reward_type="sparse"`` (a VLA's or a sparse task's reward inside the model): 1 where the
    model predicts success, 0 elsewhere, the halt penalty where it halts; the dense one is the head's."""
    run, _ = state_model

    def rollout(reward_type: str):
        venv = WorldModelVectorEnv(str(run / "world_model"), num_envs=8, max_episode_steps=30,
                                   terminate_on_success=False, reward_type=reward_type, halt_multiple=0.0)  # fmt: skip
        venv.reset(seed=0)
        actions = np.random.default_rng(0).uniform(-1, 1, (8, 30, venv.spec.action.dim)).astype(np.float32)
        return venv.chunk_step(actions)

    sparse, dense = rollout("sparse"), rollout("dense")
    np.testing.assert_array_equal(sparse.success, dense.success)  # the same imagined episodes
    assert (
        0 < sparse.success[sparse.valid].mean() < 1
    )  # some steps succeed and some do not: the test can tell
    np.testing.assert_array_equal(
        sparse.rewards[sparse.valid], sparse.success[sparse.valid].astype(np.float32)
    )
    assert not np.isin(dense.rewards[dense.valid], (0.0, 1.0)).all()  # the head's shaped values
    with pytest.raises(ValueError, match="reward_type must be 'dense' or 'sparse'"):
        WorldModelVectorEnv(str(run / "world_model"), 1, reward_type="shaped")


def test_imagined_episodes_start_from_first_frames_or_any_recorded_frame(state_model):
    run, _ = state_model
    first = WorldModelVectorEnv(str(run / "world_model"), 2)
    anywhere = WorldModelVectorEnv(str(run / "world_model"), 2, start_from="any", max_episode_steps=10)
    assert len(first.start_states) == 8  # one per recorded episode
    assert len(anywhere.start_states) > 8 * 20  # the frames along them (branched, MBPO-style rollouts)
    starts = np.stack([anywhere.reset(seed=s)[0]["state"][0] for s in range(40)])
    from_first = np.abs(starts[:, None] - first.start_states.numpy()[None]).max(-1).min(-1)
    assert (from_first > 1e-3).any()  # some episodes start mid-recording
    with pytest.raises(ValueError, match="start_from must be 'first' or 'any'"):
        WorldModelVectorEnv(str(run / "world_model"), 1, start_from="middle")


def test_ppo_trains_inside_the_world_model(state_model, tmp_path):
    run, _ = state_model
    overrides = [f"env.kwargs.checkpoint={run / 'world_model'}", "env.kwargs.max_episode_steps=10",
                 "env.num_envs=8", "run.total_env_steps=320", "policy.hidden_sizes=[32]",
                 f"run.output_dir={tmp_path}"]  # fmt: skip
    Runner(load_config("ppo_world_model", overrides)).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and np.isfinite(rows[-1]["train/policy_loss"]) and rows[-1]["env_steps"] == 320


def test_a_run_trains_on_simulated_and_imagined_envs_with_their_own_weights(state_model, tmp_path):
    """``env.world_model_envs`` puts imagined envs beside the sim's; ``env.world_model_weight``
    weighs their transitions (0: they do not move the update) and evaluation stays in the sim."""
    from policies import make_policy
    from trainer.algorithms.common import collect_on_policy
    from trainer.configs import ConfigError

    run, _ = state_model
    overrides = ["env.id=rlinf/FrankaReach-v0", "env.backend=inline", "env.num_envs=2",
                 f"env.kwargs={json.dumps(STATE_ENV)}", "env.world_model_envs=3",
                 f"env.world_model={{checkpoint: {run / 'world_model'}, max_episode_steps: 10}}",
                 "policy.hidden_sizes=[32]", "run.total_env_steps=300", "run.eval_every=1",
                 "run.eval_episodes=2", "run.final_eval_episodes=0", f"run.output_dir={tmp_path}"]  # fmt: skip
    config = load_config("ppo_reach", [*overrides, "env.world_model_weight=0.0"])
    venv = make_sim_envs(config)
    assert venv.sources == ["sim:rlinf/FrankaReach-v0"] * 2 + ["world_model:rlinf/WorldModel-v0"] * 3
    policy = make_policy(venv.spec, config.policy)
    batch = collect_on_policy(venv, policy, seed=0, num_steps=4, cameras=[])
    venv.close()
    assert batch.weights[:, :2].min() == 1.0 and batch.weights[:, 2:].max() == 0.0
    Runner(load_config("ppo_reach", overrides)).run()  # both kinds of env step in one run
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] >= 300 and "eval/success_rate" in rows[-1]
    with pytest.raises(ConfigError, match=r"env\.world_model_envs needs env\.world_model\.checkpoint"):
        load_config("ppo_reach", ["env.world_model_envs=2"])


def test_camera_frames_go_through_the_latent_and_a_side_by_side_video_is_written(tmp_path):
    env = {**STATE_ENV, "cameras": ["front"], "image_height": 32, "image_width": 32}
    demos = record_expert_demos(DemoConfig("rlinf/FrankaReach-v0", 3, str(tmp_path / "demos"), seed=0,
                                           only_successful=False, env_kwargs=env), progress=False)  # fmt: skip
    spec = sim_envs.make("rlinf/FrankaReach-v0", **env).env_spec
    cfg = WorldModelTrainConfig(dataset=str(demos.root), cameras=["front"], updates=20, batch_size=8, horizon=2,
                                latent_dim=16, hidden=64)  # fmt: skip
    metrics = train_world_model(cfg, spec, tmp_path / "run")
    assert {"frame_error_1", "frame_error_copy_last_1"} <= set(metrics)
    assert (tmp_path / "run" / "rollout.gif").stat().st_size > 1000
    venv = WorldModelVectorEnv(str(tmp_path / "run" / "world_model"), num_envs=2)
    obs = venv.chunk_step(np.zeros((2, 1, spec.action.dim), np.float32)).obs
    assert obs["images"]["front"].shape == (2, 32, 32, 3) and obs["images"]["front"].dtype == np.uint8


def test_bad_world_model_inputs_are_one_line_errors(tmp_path, state_model):
    with pytest.raises(ValueError, match=r"needs env\.kwargs\.checkpoint"):
        WorldModelVectorEnv("", num_envs=1)
    with pytest.raises(ValueError, match="is not a saved world model"):
        WorldModelVectorEnv(str(tmp_path), num_envs=1)
    spec = sim_envs.make("rlinf/FrankaReach-v0", **STATE_ENV).env_spec
    with pytest.raises(ValueError, match=r"algo\.dataset=.*is not a LeRobot v3 dataset|holds no LeRobot"):
        train_world_model(WorldModelTrainConfig(dataset=str(tmp_path)), spec, tmp_path / "x")
    run, _ = state_model
    # A model of FrankaReach beside a PickLift sim: the state fields it predicts are not the run's.
    pick_lift = {**STATE_ENV, "cameras": []}
    config = load_config("ppo_pick_lift", [f"env.kwargs={json.dumps(pick_lift)}", "env.backend=inline",
                                           "env.num_envs=1", "env.world_model_envs=1",
                                           f"env.world_model={{checkpoint: {run / 'world_model'}}}"])  # fmt: skip
    with pytest.raises(
        ValueError, match=r"state fields differ .* the world model \(rlinf/WorldModel-v0\) has"
    ):
        make_sim_envs(config)
    # A model whose reset frames hold no episode.
    empty = tmp_path / "empty_starts"
    shutil.copytree(run / "world_model", empty)
    np.savez(empty / "starts.npz", state=np.zeros((0, spec.state_dim), np.float32), first=np.zeros(0, bool))
    with pytest.raises(ValueError, match=r"starts\.npz holds no episodes to reset from"):
        WorldModelVectorEnv(str(empty), num_envs=1)


@pytest.mark.slow
def test_a_policy_trained_only_inside_a_world_model_improves_in_the_true_env(tmp_path):
    """Random episodes of a small deterministic env (tests/sim_envs/toy_gym_env.py) -> a world model ->
    PPO in the model alone -> greedy in the real env, against the same policy untrained."""
    import torch

    from policies import load_policy, make_policy
    from protos.lerobot_dataset import EpisodeFrames, LeRobotWriter
    from trainer.algorithms.common import play_greedy
    from trainer.checkpoint import POLICY_DIR, latest_checkpoint

    toy = {"module": "tests.sim_envs.toy_gym_env", "success_key": "is_success"}
    env = sim_envs.make("toy/ReachDot-v0", **toy)
    rng = np.random.default_rng(0)
    writer = LeRobotWriter(tmp_path / "random", fps=10)
    for episode in range(60):
        obs, _ = env.reset(seed=episode)
        states, actions, rewards, success = [], [], [], []
        for _ in range(20):
            action = rng.uniform(-1, 1, 2).astype(np.float32)
            states.append(obs["state"])
            actions.append(action)
            obs, reward, terminated, truncated, info = env.step(action)
            rewards.append(reward)
            success.append(info["success"])
            if terminated or truncated:
                break
        writer.add_episode(EpisodeFrames(
            task="reach the dot", images={},
            vectors={"observation.state": np.stack(states), "action": np.stack(actions)},
            scalars={"next.reward": np.array(rewards, np.float32), "next.success": np.array(success)},
        ))  # fmt: skip
    cfg = WorldModelTrainConfig(dataset=str(tmp_path / "random"), updates=800, batch_size=64, hidden=128)
    train_world_model(cfg, env.env_spec, tmp_path / "wm")
    config = load_config("ppo_world_model", [
        f"env.kwargs.checkpoint={tmp_path / 'wm' / 'world_model'}", "env.kwargs.max_episode_steps=20",
        "env.num_envs=16", "run.total_env_steps=9600", "policy.hidden_sizes=[64,64]", f"run.output_dir={tmp_path / 'ppo'}",
    ])  # fmt: skip
    Runner(config).run()
    venv = sim_envs.make_vector("toy/ReachDot-v0", 16, **toy)

    def greedy_return(policy) -> float:
        _, finished = play_greedy(venv, policy, 5000)
        return float(np.mean([e.episode_return for e in finished]))

    torch.manual_seed(0)
    untrained = greedy_return(make_policy(venv.spec, config.policy))
    trained = greedy_return(load_policy(latest_checkpoint(tmp_path / "ppo") / POLICY_DIR))
    venv.close()
    assert trained > untrained + 4.0, (untrained, trained)  # measured: -14.3 -> -5.2
    final = json.loads((tmp_path / "ppo" / "final_eval.json").read_text())
    assert final["imagined"] is True and final["video"] == ""  # scored in the model: no video, said so


def test_one_imagined_env_passes_gymnasiums_env_checker(state_model):
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    import policies.world_model  # noqa: F401  (registers rlinf/WorldModel-v0)

    run, _ = state_model
    env = gym.make("rlinf/WorldModel-v0", checkpoint=str(run / "world_model"), max_episode_steps=5)
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    steps, done = 0, False
    while not done:
        obs, _, terminated, truncated, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs) and isinstance(info["success"], bool)
        steps, done = steps + 1, terminated or truncated
    assert steps <= 5
    again, _ = env.reset(seed=1)
    np.testing.assert_allclose(again["state"], env.reset(seed=1)[0]["state"])  # the seed draws the start


@pytest.mark.parametrize("cameras", [[], ["front"]])
def test_the_batched_members_step_is_each_members_own_forward(cameras):
    """All members in one batched matmul per layer compute what each ``Dynamics`` computes alone,
    from shared inputs and from per-member ones, and their gradients reach every member."""
    import torch

    from policies.world_model.model import WorldModel, WorldModelConfig

    env = {**STATE_ENV, "cameras": cameras, "image_height": 32, "image_width": 32}
    spec = sim_envs.make("rlinf/FrankaReach-v0", **env).env_spec
    torch.manual_seed(0)
    model = WorldModel(spec, WorldModelConfig(list(cameras), latent_dim=8, hidden=32, ensemble=3))
    z = torch.randn(5, model.latent_dim)
    state, action = torch.randn(5, spec.state_dim), torch.rand(5, spec.action.dim) * 2 - 1
    for zs, states in ((z, state), (torch.randn(3, 5, model.latent_dim), torch.randn(3, 5, spec.state_dim))):
        batched_z, batched_state = model.members_step(zs, states, action)
        for i, member in enumerate(model.members):
            alone_z, alone_state = member(zs[i] if zs.dim() == 3 else zs, states[i] if states.dim() == 3 else states,
                                          action)  # fmt: skip
            torch.testing.assert_close(batched_state[i], alone_state, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(batched_z[i], alone_z, atol=1e-5, rtol=1e-5)
    batched_state.sum().backward()
    assert all(m.state_delta.weight.grad is not None and m.state_delta.weight.grad.abs().sum() > 0
               for m in model.members)  # fmt: skip
