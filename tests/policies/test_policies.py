import numpy as np
import pytest
import torch

import sim_envs
from policies import PolicyConfig, load_policy, make_policy
from sim_envs.vector import SimVectorEnv


@pytest.fixture(scope="module")
def env():
    env = sim_envs.make("rlinf/FrankaPickLift-v0", image_height=64, image_width=64)
    yield env
    env.close()


def batch(env, n=3):
    obs = [env.reset(seed=i)[0] for i in range(n)]
    return SimVectorEnv.stack_obs(obs)


@pytest.mark.parametrize("head", ["gaussian", "tanh_gaussian"])
@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_act_returns_chunks_inside_the_bounds(env, kind, head):
    cfg = PolicyConfig(
        kind=kind,
        head=head,
        chunk_size=4,
        cameras=["front", "wrist"] if kind == "cnn" else [],
        hidden_sizes=[32],
    )
    policy = make_policy(env.env_spec, cfg)
    out = policy.act(batch(env), mode="sample")
    assert out.actions.shape == (3, 4, 7)
    assert (out.actions >= -1).all() and (out.actions <= 1).all()
    assert out.log_prob.shape == (3,) and torch.isfinite(out.log_prob).all()
    assert out.value.shape == (3,)
    greedy_a = policy.act(batch(env), mode="greedy").actions
    greedy_b = policy.act(batch(env), mode="greedy").actions
    torch.testing.assert_close(greedy_a, greedy_b)
    evaluation = policy.evaluate(batch(env), out.samples)
    torch.testing.assert_close(evaluation.log_prob, out.log_prob, rtol=1e-4, atol=1e-4)


def test_cnn_policy_uses_the_images(env):
    policy = make_policy(env.env_spec, PolicyConfig(kind="cnn", cameras=["front"], hidden_sizes=[32]))
    obs = batch(env, 2)
    base = policy.act(obs, mode="greedy").value
    obs["images"]["front"] = 255 - obs["images"]["front"]
    assert not torch.allclose(base, policy.act(obs, mode="greedy").value)


def test_joint_position_actions_are_mapped_onto_joint_limits():
    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=(), action_mode="joint_position")
    policy = make_policy(env.env_spec, PolicyConfig(init_log_std=2.0))
    out = policy.act(batch(env, 64))
    low, high = env.env_spec.action.low_array(), env.env_spec.action.high_array()
    actions = out.actions[:, 0].numpy()
    assert (actions >= low - 1e-6).all() and (actions <= high + 1e-6).all()
    assert actions[:, 3].min() < -2.5  # joint 4 reaches deep into its negative range


def test_normalizer_tracks_statistics_and_is_saved(env, tmp_path):
    policy = make_policy(env.env_spec, PolicyConfig(hidden_sizes=[16]))
    obs = batch(env, 5)
    policy.update_normalizers(obs)
    mean = policy.encoder.state_norm.mean.numpy()
    np.testing.assert_allclose(mean, obs["state"].mean(0), rtol=1e-3, atol=1e-3)
    policy.save(tmp_path / "policy")
    loaded = load_policy(tmp_path / "policy")
    np.testing.assert_allclose(loaded.encoder.state_norm.mean.numpy(), mean)
    torch.testing.assert_close(loaded.act(obs, "greedy").actions, policy.act(obs, "greedy").actions)


def test_a_started_policy_keeps_the_statistics_its_weights_were_fit_with(env, tmp_path):
    """RL from a BC/SFT start: the rollouts' observations must not rescale the inputs under the
    started weights (a PickLift BC start fell from 0.31 to 0.00 greedy success that way)."""
    fitted = make_policy(env.env_spec, PolicyConfig(hidden_sizes=[16]))
    fitted.update_normalizers(batch(env, 5))
    fitted.save(tmp_path / "bc")
    started = make_policy(env.env_spec, PolicyConfig(hidden_sizes=[16], init_from=str(tmp_path / "bc")))
    fresh = make_policy(env.env_spec, PolicyConfig(hidden_sizes=[16]))
    fresh.load_weights(fitted.state_dict())  # the same numbers, but not started through init_from
    live = batch(env, 4)
    live["state"] = live["state"] * 3.0 + 1.0  # the RL rollouts see other states
    before = started.act(live, "greedy").actions
    for policy in (started, fresh):
        policy.update_normalizers(live)
    torch.testing.assert_close(started.act(live, "greedy").actions, before)
    assert not torch.allclose(fresh.act(live, "greedy").actions, before)
    started.save(tmp_path / "rl")  # a resumed or further started run keeps them too
    resumed = load_policy(tmp_path / "rl")
    resumed.update_normalizers(live)
    torch.testing.assert_close(resumed.act(live, "greedy").actions, before)


def test_loading_weights_of_another_shape_says_so(env):
    policy = make_policy(env.env_spec, PolicyConfig(hidden_sizes=[16]))
    other = make_policy(env.env_spec, PolicyConfig(hidden_sizes=[32]))
    with pytest.raises(ValueError, match=r"has shape \[32, 32\], this policy expects \[16, 32\]"):
        policy.load_weights(other.state_dict())


def test_bad_policy_configs():
    with pytest.raises(ValueError, match="needs at least one camera"):
        PolicyConfig(kind="cnn")
    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=())
    with pytest.raises(ValueError, match="camera 'front' is not in the env's cameras"):
        make_policy(env.env_spec, PolicyConfig(kind="cnn", cameras=["front"]))


def test_a_saved_policy_is_a_folder_of_json_and_safetensors(env, tmp_path):
    policy = make_policy(env.env_spec, PolicyConfig(hidden_sizes=[16]))
    policy.save(tmp_path / "policy")
    assert sorted(p.name for p in (tmp_path / "policy").iterdir()) == ["model.safetensors", "policy.json"]
    assert not list(tmp_path.glob(".*.tmp"))  # the staging folder was moved into place
    obs = batch(env)
    torch.testing.assert_close(
        load_policy(tmp_path / "policy").act(obs, "greedy").actions, policy.act(obs, "greedy").actions
    )


def test_a_single_file_policy_of_older_versions_still_loads(env, tmp_path):
    policy = make_policy(env.env_spec, PolicyConfig(hidden_sizes=[16]))
    payload = {
        "class": "GaussianActorCritic",
        "config": policy.config_dict() | {"vla": None},
        "spec": env.env_spec.to_dict(),
        "state_dict": policy.state_dict(),
    }
    payload["config"].pop("vla")
    torch.save(payload, tmp_path / "old.pt")
    obs = batch(env)
    torch.testing.assert_close(
        load_policy(tmp_path / "old.pt").act(obs, "greedy").actions, policy.act(obs, "greedy").actions
    )


def test_loading_what_is_not_a_saved_policy_says_so(tmp_path):
    with pytest.raises(ValueError, match="is not a saved policy"):
        load_policy(tmp_path)
