"""``PiPolicy``: π0, π0.5 and SmolVLA (tiny random instances of the real classes, and the
upstream-written reference checkpoints) behind the policy interface, with the Flow-SDE sampler for RL."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import sim_envs  # noqa: E402
from policies import PolicyConfig, load_policy, make_policy  # noqa: E402
from policies.config import VLAConfig  # noqa: E402
from policies.vla.pi.loaded import load_pi  # noqa: E402
from policies.vla.pi.models import euler_sample  # noqa: E402
from policies.vla.pi.policy import PiPolicy  # noqa: E402
from tests.policies.test_vla_common import observations, one_decision_batch  # noqa: E402
from trainer.algorithms.grpo import GRPO, GRPOConfig  # noqa: E402
from trainer.algorithms.ppo import PPO, PPOConfig  # noqa: E402

FAMILIES = ["pi0", "pi05", "smolvla"]
REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "vla_reference"


@pytest.fixture(scope="module")
def env():
    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=("front",), image_height=64, image_width=64)
    yield env
    env.close()


def tiny(env, family: str, chunk: int = 2, vla: dict | None = None, **overrides) -> PiPolicy:
    torch.manual_seed(0)
    vla_cfg = VLAConfig(backbone=f"tiny:{family}", flow_steps=3, **(vla or {}))
    cfg = PolicyConfig(kind="vla", cameras=["front"], chunk_size=chunk, vla=vla_cfg, **overrides)
    policy = make_policy(env.env_spec, cfg)
    assert isinstance(policy, PiPolicy)
    return policy


@pytest.mark.parametrize("family", FAMILIES)
def test_act_gives_chunks_in_bounds_and_evaluate_reproduces_their_log_prob(env, family):
    policy = tiny(env, family)
    obs = observations(env)
    out = policy.act(obs)
    assert out.actions.shape == (4, 2, env.env_spec.action.dim) and out.value.shape == (4,)
    low, high = env.env_spec.action.low_array(), env.env_spec.action.high_array()
    assert np.all(out.actions.numpy() >= low - 1e-6) and np.all(out.actions.numpy() <= high + 1e-6)
    evaluation = policy.evaluate(obs, out.samples)
    torch.testing.assert_close(evaluation.log_prob, out.log_prob, atol=1e-5, rtol=1e-6)
    # one log-prob term per chunk step and env action dim (summed over the denoising steps)
    assert out.log_prob_terms.shape == (4, 2 * env.env_spec.action.dim)
    torch.testing.assert_close(out.log_prob_terms.sum(-1), out.log_prob)
    torch.testing.assert_close(evaluation.log_prob_terms, out.log_prob_terms, atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(evaluation.value, out.value, atol=1e-5, rtol=0)
    assert not torch.equal(policy.act(obs).samples, out.samples)
    torch.testing.assert_close(policy.act(obs, "greedy").actions, policy.act(obs, "greedy").actions)
    # Noise only in the env's action dims: the padding to max_action_dim follows its mean.
    pad = out.samples[:, 1:, :, env.env_spec.action.dim :]
    again = policy.act(obs).samples[:, 1:, :, env.env_spec.action.dim :]
    assert not torch.equal(pad, again)  # it depends on the (random) real dims through the expert
    assert out.log_prob.abs().sum() > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_one_sde_step_per_chunk_leaves_the_rest_on_eulers_path_and_evaluate_scores_that_step(env, family):
    policy = tiny(env, family, vla={"flow_sde_steps": "one"})
    obs = observations(env)
    torch.manual_seed(1)
    out = policy.act(obs)
    steps, dims = policy.schedule.steps, env.env_spec.action.dim
    assert out.samples.shape[:2] == (4, steps + 2)  # the chain, then the SDE step's index
    noisy = out.samples[:, -1, 0, 0].long()
    assert set(noisy.tolist()) <= set(range(steps)) and torch.all(out.samples[:, -1] == noisy.view(4, 1, 1))
    prefix, state = policy._prefix(obs)
    with torch.no_grad():
        for k, t in enumerate(policy.schedule.times()):
            x = out.samples[:, k]
            euler, _ = policy.schedule.step(x, policy._velocity(prefix, state, x, t), t, stochastic=False)
            off_path = (out.samples[:, k + 1, :, :dims] - euler[..., :dims]).abs().amax((1, 2))
            assert torch.all(off_path[noisy != k] < 1e-6) and torch.all(off_path[noisy == k] > 1e-3), (
                k,
                off_path,
            )
    assert torch.equal(policy.env_actions(out.samples[:, steps]), out.actions)
    evaluation = policy.evaluate(obs, out.samples)
    torch.testing.assert_close(evaluation.log_prob, out.log_prob, atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(evaluation.log_prob_terms, out.log_prob_terms, atol=1e-5, rtol=1e-6)
    # that step under the all-steps sampler's formula (same weights) gives the same log-prob
    joint = tiny(env, family)
    joint.load_state_dict(policy.state_dict())
    expected = torch.zeros(4)
    with torch.no_grad():
        prefix, state = joint._prefix(obs)
        for k, t in enumerate(joint.schedule.times()):
            x = out.samples[:, k]
            mean, std = joint.schedule.step(x, joint._velocity(prefix, state, x, t), t, stochastic=True)
            step = torch.distributions.Normal(mean[..., :dims], std).log_prob(out.samples[:, k + 1, :, :dims])
            expected = torch.where(noisy == k, step.sum((1, 2)), expected)
    torch.testing.assert_close(out.log_prob, expected, atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError, match="were they sampled with flow_sde_steps=all"):
        policy.evaluate(obs, out.samples[:, :-1])
    greedy = policy.act(obs, "greedy")
    torch.testing.assert_close(greedy.actions, joint.act(obs, "greedy").actions)  # greedy: Euler's, unchanged


@pytest.mark.parametrize("family", FAMILIES)
def test_a_sampling_temperature_scales_the_chains_starting_noise(env, family):
    cold, warm = tiny(env, family, vla={"sampling_temperature": 0.25}), tiny(env, family)
    obs = observations(env)
    torch.manual_seed(3)
    cold_out = cold.act(obs)
    torch.manual_seed(3)
    warm_out = warm.act(obs)
    torch.testing.assert_close(cold_out.samples[:, 0], 0.25 * warm_out.samples[:, 0])  # x0 ~ N(0, T^2 I)
    torch.testing.assert_close(
        cold.evaluate(obs, cold_out.samples).log_prob, cold_out.log_prob, atol=1e-5, rtol=1e-6
    )
    torch.testing.assert_close(cold.act(obs, "greedy").actions, warm.act(obs, "greedy").actions)
    # near freezing and without the SDE's noise, a rollout is the greedy chunk
    frozen = tiny(env, family, vla={"sampling_temperature": 1e-7, "flow_noise_level": 0.0})
    torch.testing.assert_close(frozen.act(obs).actions, frozen.act(obs, "greedy").actions, atol=1e-4, rtol=0)
    assert not torch.allclose(warm.act(obs).actions, warm.act(obs, "greedy").actions, atol=1e-3, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_at_temperature_zero_every_chain_starts_at_the_greedy_chains_x0_and_only_the_sde_explores(
    env, family
):
    policy = tiny(env, family, vla={"sampling_temperature": 0.0})
    obs = observations(env)
    out = policy.act(obs)
    assert torch.count_nonzero(out.samples[:, 0]) == 0  # x0 = 0, as greedy's
    torch.testing.assert_close(policy.evaluate(obs, out.samples).log_prob, out.log_prob, atol=1e-5, rtol=1e-6)
    greedy = policy.act(obs, "greedy")
    assert not torch.allclose(out.actions, greedy.actions, atol=1e-3, rtol=0)  # the SDE's steps still explore
    # the first step's mean is greedy's first step: both chains leave x0 = 0 along the same velocity
    prefix, state = policy._prefix(obs)
    t0 = policy.schedule.times()[0]
    euler, _ = policy.schedule.step(
        out.samples[:, 0], policy._velocity(prefix, state, out.samples[:, 0], t0), t0, stochastic=False
    )
    torch.testing.assert_close(euler, greedy.samples[:, 1])


@pytest.mark.parametrize(("ratio_level", "sde_steps"), [("chunk", "all"), ("token", "all"), ("token", "one")])
@pytest.mark.parametrize("family", FAMILIES)
def test_a_grpo_step_moves_log_probs_in_the_sign_of_the_advantages(env, family, ratio_level, sde_steps):
    policy = tiny(env, family, value_head=False, vla={"flow_sde_steps": sde_steps})
    obs = observations(env)
    out = policy.act(obs)
    grpo = GRPO(
        policy,
        GRPOConfig(
            group_size=2, learning_rate=1e-4, update_epochs=1, num_minibatches=1, ratio_level=ratio_level
        ),
    )
    grpo.update(one_decision_batch(obs, out, [1.0, 0.0, 0.0, 1.0]))
    moved = policy.evaluate(obs, out.samples).log_prob.detach() - out.log_prob
    assert moved[[0, 3]].mean() > 0 > moved[[1, 2]].mean(), moved


@pytest.mark.parametrize(("ratio_level", "sde_steps"), [("chunk", "all"), ("token", "all"), ("token", "one")])
@pytest.mark.parametrize("family", FAMILIES)
def test_a_ppo_step_moves_log_probs_in_the_sign_of_the_advantages(env, family, ratio_level, sde_steps):
    policy = tiny(env, family, vla={"flow_sde_steps": sde_steps})
    obs = observations(env)
    out = policy.act(obs)
    ppo = PPO(
        policy,
        PPOConfig(
            learning_rate=1e-4, update_epochs=1, num_minibatches=1, value_coef=0.0, ratio_level=ratio_level
        ),
    )
    ppo.update(one_decision_batch(obs, out, [2.0, -2.0, -2.0, 2.0]))
    moved = policy.evaluate(obs, out.samples).log_prob.detach() - out.log_prob
    assert moved[[0, 3]].mean() > 0 > moved[[1, 2]].mean(), moved


FLOW_NOISE = {"flow_noise_method": "flow_noise", "flow_noise_std_range": [0.05, 0.2]}


@pytest.mark.parametrize("family", FAMILIES)
def test_flow_noise_steps_are_eulers_plus_the_heads_std_and_evaluate_reproduces_them(env, family):
    policy = tiny(env, family, vla=FLOW_NOISE)
    obs = observations(env)
    out = policy.act(obs)
    torch.testing.assert_close(policy.evaluate(obs, out.samples).log_prob, out.log_prob, atol=1e-5, rtol=1e-6)
    # the log-prob, rebuilt by hand: each step N(x - dt v, std) with the std the head reads from the expert
    prefix, state = policy._prefix(obs)
    dims, expected, stds = policy.action_dim, torch.zeros(4), []
    for k, t in enumerate(policy.schedule.times()):
        x, drawn = out.samples[:, k], out.samples[:, k + 1]
        velocity, features = policy._velocity_and_features(prefix, state, x, t)
        euler = x - policy.schedule.dt * velocity
        std = policy.noise_head(features).detach()
        stds.append(std)
        expected += torch.distributions.Normal(euler[..., :dims], std).log_prob(drawn[..., :dims]).sum((1, 2))
        torch.testing.assert_close(drawn[..., dims:], euler[..., dims:])  # the padding follows its mean
    torch.testing.assert_close(out.log_prob, expected, atol=1e-4, rtol=1e-5)
    stds = torch.stack(stds)
    assert stds.shape[-2:] == (2, dims) and stds.min() >= 0.05 and stds.max() <= 0.2 and stds.std() > 0
    # greedy does not use the head: the same weights with the SDE act the same
    sde = tiny(env, family)
    sde.load_state_dict(policy.state_dict(), strict=False)
    torch.testing.assert_close(policy.act(obs, "greedy").actions, sde.act(obs, "greedy").actions)


@pytest.mark.parametrize("family", FAMILIES)
def test_flow_noise_with_one_noisy_step_credits_that_step_alone(env, family):
    policy = tiny(env, family, vla={**FLOW_NOISE, "flow_sde_steps": "one"})
    obs = observations(env)
    out = policy.act(obs)
    torch.testing.assert_close(policy.evaluate(obs, out.samples).log_prob, out.log_prob, atol=1e-5, rtol=1e-6)
    noisy = out.samples[:, -1, 0, 0].long()
    prefix, state = policy._prefix(obs)
    for k, t in enumerate(policy.schedule.times()):
        x = out.samples[:, k]
        euler = x - policy.schedule.dt * policy._velocity(prefix, state, x, t)
        on_euler = torch.isclose(out.samples[:, k + 1], euler, atol=1e-6).flatten(1).all(1)
        torch.testing.assert_close(on_euler, noisy != k)  # Euler's step everywhere but at the noisy one


@pytest.mark.parametrize("family", FAMILIES)
def test_a_grpo_step_with_flow_noise_moves_the_noise_head_and_the_log_probs_in_the_advantages_sign(
    env, family
):
    policy = tiny(env, family, value_head=False, vla=FLOW_NOISE)
    head_before = {n: p.detach().clone() for n, p in policy.noise_head.named_parameters()}
    obs = observations(env)
    out = policy.act(obs)
    grpo = GRPO(policy, GRPOConfig(group_size=2, learning_rate=1e-4, update_epochs=1, num_minibatches=1))
    grpo.update(one_decision_batch(obs, out, [1.0, 0.0, 0.0, 1.0]))
    assert any(not torch.equal(p, head_before[n]) for n, p in policy.noise_head.named_parameters())
    moved = policy.evaluate(obs, out.samples).log_prob.detach() - out.log_prob
    assert moved[[0, 3]].mean() > 0 > moved[[1, 2]].mean(), moved


def test_flow_noise_starts_from_an_sft_policy_with_a_fresh_noise_head(env, tmp_path):
    tiny(env, "pi05").save(tmp_path / "sft")
    started = tiny(env, "pi05", vla=FLOW_NOISE, init_from=str(tmp_path / "sft"))
    obs = observations(env)
    torch.manual_seed(1)
    ours = started.act(obs, "greedy").actions
    torch.manual_seed(1)
    torch.testing.assert_close(ours, load_policy(tmp_path / "sft").act(obs, "greedy").actions)
    assert started.noise_head is not None and started.act(obs).log_prob.shape == (4,)


def test_bad_flow_noise_settings_are_one_line_each():
    with pytest.raises(
        ValueError, match=r"flow_noise_method must be one of \['flow_sde', 'flow_noise'\], got 'reinflow'"
    ):
        VLAConfig(flow_noise_method="reinflow")
    with pytest.raises(
        ValueError, match=r"flow_noise_std_range must be \[min, max\] with 0 < min <= max, got \[0.2, 0.1\]"
    ):
        VLAConfig(flow_noise_std_range=[0.2, 0.1])
    VLAConfig(
        flow_noise_method="flow_noise", flow_noise_level=0.0, sampling_temperature=0.0
    )  # the head explores


@pytest.mark.parametrize("family", FAMILIES)
def test_train_expert_only_moves_the_expert_and_leaves_the_vlm_as_it_was(env, family):
    policy = tiny(env, family, value_head=False, vla={"train_expert_only": True})
    vlm = {n for n, _ in policy.vlm_module().named_parameters()}
    assert vlm and not any(p.requires_grad for p in policy.vlm_module().parameters())
    vlm_before = {n: p.detach().clone() for n, p in policy.vlm_module().named_parameters()}
    expert_before = {n: p.detach().clone() for n, p in policy.expert_module().named_parameters()}
    obs = observations(env)
    out = policy.act(obs)
    grpo = GRPO(policy, GRPOConfig(group_size=2, learning_rate=1e-3, update_epochs=1, num_minibatches=1))
    grpo.update(one_decision_batch(obs, out, [1.0, 0.0, 0.0, 1.0]))
    for name, param in policy.vlm_module().named_parameters():
        assert torch.equal(param, vlm_before[name]), name
    moved_expert = [
        n for n, p in policy.expert_module().named_parameters() if not torch.equal(p, expert_before[n])
    ]
    assert moved_expert
    moved = policy.evaluate(obs, out.samples).log_prob.detach() - out.log_prob
    assert moved[[0, 3]].mean() > 0 > moved[[1, 2]].mean(), moved


def test_train_expert_only_on_openvla_is_one_line(env):
    cfg = PolicyConfig(kind="vla", cameras=["front"], chunk_size=1,
                       vla=VLAConfig(backbone="tiny:openvla", train_expert_only=True))  # fmt: skip
    with pytest.raises(ValueError, match="train_expert_only is for the flow families"):
        make_policy(env.env_spec, cfg)


@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_lora_targets_the_real_module_names_and_the_vision_tower_is_frozen(env, family):
    full = tiny(env, family, value_head=False)
    lora = tiny(env, family, value_head=False, vla={"lora_rank": 4})
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable if "lora_A" in n}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert any("language_model" in n for n in trainable if "lora_A" in n)
    expert = "model.dit" if family == "pi0" else "model.expert"
    assert any(expert in n for n in trainable if "lora_A" in n)
    assert not any("vision_tower" in n for n in trainable)
    assert not any(("language_model" in n or expert in n) and "lora_" not in n for n in trainable)
    assert not any("vision_tower" in n for n, p in full.named_parameters() if p.requires_grad)
    assert sum(p.numel() for n, p in lora.named_parameters() if n in trainable) < 0.5 * sum(
        p.numel() for p in full.parameters()
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_imitation_moves_the_expert_toward_the_targets(env, family):
    policy = tiny(env, family, value_head=False)
    obs = observations(env)
    targets = torch.full((4, 2, env.env_spec.action.dim), 0.5)
    valid = torch.ones(4, 2)
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=3e-3)
    adim = env.env_spec.action.dim

    def distance() -> float:
        return (policy.act(obs, "greedy").samples[:, -1, :, :adim] - 0.5).abs().mean().item()

    before = distance()
    for _ in range(40):
        loss = policy.imitation_loss(obs, targets, valid)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = distance()
    print(f"{family}: greedy chunk's distance to the targets {before:.3f} -> {after:.3f}")
    assert after < 0.5 * before


@pytest.mark.parametrize("family", FAMILIES)
def test_save_then_load_gives_the_same_actions(env, family, tmp_path):
    policy = tiny(env, family)
    policy.update_normalizers(observations(env, 8))
    policy.save(tmp_path / "p")
    loaded = load_policy(tmp_path / "p")
    obs = observations(env)
    torch.testing.assert_close(loaded.act(obs, "greedy").actions, policy.act(obs, "greedy").actions)


def reference_spec(env):
    """The Reach env's spec with the fixtures' sizes: an 8-dim state, 7 actions, one camera."""
    from protos import EnvSpec

    spec = env.env_spec.to_dict()
    spec["state_fields"] = [{"name": "joint_pos", "size": 8}]
    spec["cameras"] = [{"name": "base", "height": 64, "width": 64, "fps": 10.0}]
    spec["action"] = {**spec["action"], "low": [-10.0] * 7, "high": [10.0] * 7}
    return EnvSpec.from_dict(spec)


@pytest.mark.skipif(not REFERENCE.is_dir(), reason=f"no reference fixtures at {REFERENCE}")
@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_at_noise_level_zero_the_sampler_is_upstreams_euler_sampler(env, family):
    """The policy over the real (upstream-written) checkpoint: greedy with a = 0 from zero noise is
    upstream's 10-step Euler chunk, mapped to env units by the checkpoint's norm stats."""
    folder = REFERENCE / family
    vla = VLAConfig(
        checkpoint=str(folder / "openpi"), dims=str(folder / "tiny_dims.json"),
        tokenizer=str(folder / "paligemma_tokenizer"), flow_steps=10, flow_noise_level=0.0,
    )  # fmt: skip
    spec = reference_spec(env)
    policy = make_policy(spec, PolicyConfig(kind="vla", cameras=["base"], chunk_size=5, vla=vla))
    loaded = load_pi(folder / "openpi", folder / "tiny_dims.json", folder / "paligemma_tokenizer")
    generator = torch.Generator().manual_seed(0)
    obs = {
        "state": torch.randn(2, 8, generator=generator),
        "images": {"base": torch.randint(0, 255, (2, 64, 64, 3), dtype=torch.uint8, generator=generator)},
        "instruction": ["pick up the red cube", "open the drawer"],
    }
    noise = torch.zeros(2, 5, 32)
    batch = loaded.inputs({"base_0_rgb": obs["images"]["base"]}, obs["state"], obs["instruction"])
    upstream = euler_sample(loaded.model, loaded.prefix(batch), batch.state, noise, 10)[0]
    ours = policy.act(obs, "greedy")
    torch.testing.assert_close(ours.samples[:, -1], upstream, atol=1e-5, rtol=0)
    expected = torch.clamp(loaded.checkpoint.action_norm.unnormalize(upstream[..., :7]), -10.0, 10.0)
    torch.testing.assert_close(ours.actions, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_train_runs_grpo_on_it_unchanged_and_saves_a_loadable_policy(family, tmp_path):
    from trainer.checkpoint import POLICY_DIR, latest_checkpoint
    from trainer.configs import load_config
    from trainer.runner import Runner

    env_yaml = "env.kwargs={cameras: [front], image_height: 64, image_width: 64, action_rotation: false, max_episode_steps: 4}"
    cfg = load_config("grpo_reach", [
        "policy.kind=vla", "policy.cameras=[front]", f"policy.vla.backbone=tiny:{family}",
        "policy.vla.flow_steps=2", "policy.chunk_size=2", "policy.value_head=false", "env.id=rlinf/FrankaReach-v0",
        "env.num_envs=4", "env.backend=inline", env_yaml, "algo.group_size=2", "run.eval_every=0", "run.video=false",
        "run.final_eval_episodes=0", "run.total_env_steps=16", f"run.output_dir={tmp_path}",
        # π0.5 also runs RLinf's one-SDE-step sampler under the OFT GRPO recipe's options
        *(["policy.vla.flow_sde_steps=one", "algo.ratio_level=token", "algo.scale_by_group_std=false",
           "algo.drop_uniform_groups=true"] if family == "pi05" else []),
    ])  # fmt: skip
    Runner(cfg).run()
    saved = load_policy(latest_checkpoint(tmp_path) / POLICY_DIR)
    assert isinstance(saved, PiPolicy) and type(saved) is tiny_policy_class(family)
    assert saved.cfg.vla.flow_sde_steps == ("one" if family == "pi05" else "all")


def tiny_policy_class(family: str) -> type:
    from policies.vla.smolvla.policy import SmolVLAPolicy

    return SmolVLAPolicy if family == "smolvla" else PiPolicy


def test_smolvla_lora_adapts_both_llamas_and_its_vision_model_is_frozen(env):
    full = tiny(env, "smolvla", value_head=False)
    assert not any("vision_model" in n for n, p in full.named_parameters() if p.requires_grad)
    lora = tiny(env, "smolvla", value_head=False, vla={"lora_rank": 4})
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable if "lora_A" in n}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert any("text_model" in n for n in trainable if "lora_A" in n)
    assert any("lm_expert" in n for n in trainable if "lora_A" in n)
    assert not any(("text_model" in n or "lm_expert" in n) and "lora_" not in n for n in trainable)
    assert {"model.action_in_proj.weight", "model.state_proj.weight"} <= trainable


@pytest.mark.skipif(not REFERENCE.is_dir(), reason=f"no reference fixtures at {REFERENCE}")
def test_smolvla_at_noise_level_zero_is_lerobots_euler_sampler(env):
    from policies.vla.smolvla.loaded import load_smolvla
    from policies.vla.smolvla.model import euler_sample as smolvla_euler

    folder = REFERENCE / "smolvla"
    vla = VLAConfig(checkpoint=str(folder / "lerobot"), tokenizer=str(folder / "tiny_smolvlm"),
                    flow_steps=10, flow_noise_level=0.0)  # fmt: skip
    spec = reference_spec(env)
    policy = make_policy(spec, PolicyConfig(kind="vla", cameras=["base"], chunk_size=5, vla=vla))
    loaded = load_smolvla(folder / "lerobot", folder / "tiny_smolvlm")
    generator = torch.Generator().manual_seed(0)
    obs = {
        "state": torch.randn(2, 8, generator=generator),
        "images": {"base": torch.randint(0, 255, (2, 64, 64, 3), dtype=torch.uint8, generator=generator)},
        "instruction": ["pick up the red cube", "open the drawer"],
    }
    # The env's one camera fills the checkpoint's first slot; LeRobot leaves the absent one out.
    loaded.checkpoint = dataclasses.replace(loaded.checkpoint, cameras=("top",))
    batch = loaded.inputs({"top": obs["images"]["base"]}, obs["state"], obs["instruction"])
    upstream, _ = smolvla_euler(loaded.model, loaded.prefix(batch), torch.zeros(2, 5, 32), 10)
    ours = policy.act(obs, "greedy")
    torch.testing.assert_close(ours.samples[:, -1], upstream, atol=1e-5, rtol=0)
    expected = torch.clamp(loaded.checkpoint.action_norm.unnormalize(upstream[..., :7]), -10.0, 10.0)
    torch.testing.assert_close(ours.actions, expected, atol=1e-5, rtol=0)


def test_tiny_pi05_reads_every_state_dimension_from_its_prompt():
    """π0.5 has no state token: the state is digits in the prompt. A 44-dim state (PickColor's
    privileged one) must fit in the tiny model's token length, or its last dimensions are cut off
    and the policy cannot see them."""
    env = sim_envs.make(
        "rlinf/FrankaPickColor-v0", cameras=("front",), image_height=64, image_width=64, privileged_state=True
    )
    try:
        policy = tiny(env, "pi05", normalize_state=False)
        obs = observations(env, n=1)
    finally:
        env.close()
    assert policy.spec.state_dim == 44
    changed = {**obs, "state": obs["state"].copy()}
    changed["state"][:, -1] = obs["state"][:, -1] + 0.5  # only the last dimension moves
    with torch.no_grad():
        prefix, _ = policy._prefix(obs)
        prefix_changed, _ = policy._prefix(changed)
    assert not torch.allclose(prefix.hidden, prefix_changed.hidden)
