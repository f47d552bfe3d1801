"""``OpenVLAPolicy``: OpenVLA (a tiny random instance of the real architecture, and the
upstream-written reference checkpoint) behind the policy interface, RL over the action ids."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import sim_envs  # noqa: E402
from policies import PolicyConfig, load_policy, make_policy  # noqa: E402
from policies.config import VLAConfig  # noqa: E402
from policies.vla.openvla.policy import OpenVLAPolicy  # noqa: E402
from tests.policies.test_vla_common import observations, one_decision_batch  # noqa: E402
from trainer.algorithms.grpo import GRPO, GRPOConfig  # noqa: E402
from trainer.algorithms.ppo import PPO, PPOConfig  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "vla_reference" / "openvla"
LLAMA_PROJECTIONS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


@pytest.fixture(scope="module")
def env():
    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=("front",), image_height=64, image_width=64)
    yield env
    env.close()


FAMILIES = ["openvla", "openvla-oft"]
CHUNK = {"openvla": 1, "openvla-oft": 2}  # OFT decodes a chunk in one pass


def tiny(env, vla: dict | None = None, family: str = "openvla", **overrides) -> OpenVLAPolicy:
    torch.manual_seed(0)
    vla_cfg = VLAConfig(**{"backbone": f"tiny:{family}", **(vla or {})})
    cfg = PolicyConfig(kind="vla", cameras=["front"], chunk_size=CHUNK[family], vla=vla_cfg, **overrides)
    policy = make_policy(env.env_spec, cfg)
    assert isinstance(policy, OpenVLAPolicy)
    return policy


@pytest.mark.parametrize("family", FAMILIES)
def test_act_gives_action_tokens_in_bounds_and_evaluate_reproduces_their_log_prob(env, family):
    policy = tiny(env, family=family)
    obs = observations(env)
    out = policy.act(obs)
    adim = env.env_spec.action.dim
    chunk = CHUNK[family]
    assert out.actions.shape == (4, chunk, adim) and out.samples.shape == (4, chunk, adim)
    assert out.value.shape == (4,)
    ids = out.samples.long()
    assert ids.min() >= policy.action_ids[0] and ids.max() <= policy.action_ids[-1]
    low, high = env.env_spec.action.low_array(), env.env_spec.action.high_array()
    assert np.all(out.actions.numpy() >= low - 1e-6) and np.all(out.actions.numpy() <= high + 1e-6)
    evaluation = policy.evaluate(obs, out.samples)
    torch.testing.assert_close(evaluation.log_prob, out.log_prob, atol=1e-5, rtol=1e-6)
    # one log-prob term per action token, for token-level ratios
    assert out.log_prob_terms.shape == (4, chunk * adim)
    torch.testing.assert_close(out.log_prob_terms.sum(-1), out.log_prob)
    torch.testing.assert_close(evaluation.log_prob_terms, out.log_prob_terms, atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(evaluation.value, out.value, atol=1e-5, rtol=0)
    torch.testing.assert_close(policy.value(obs), out.value, atol=1e-5, rtol=0)
    assert not torch.equal(policy.act(obs).samples, out.samples)
    assert torch.equal(policy.act(obs, "greedy").samples, policy.act(obs, "greedy").samples)
    # The entropy is over the 256 action ids only: at most 256 equally likely bins per dim.
    assert torch.all(evaluation.entropy <= chunk * adim * np.log(256) + 1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_sampling_temperature_sharpens_rollouts_and_the_log_probs_are_of_it(env, family):
    cold, warm = tiny(env, {"sampling_temperature": 0.25}, family=family), tiny(env, family=family)
    obs = observations(env)
    greedy = cold.act(obs, "greedy").samples
    assert torch.equal(greedy, warm.act(obs, "greedy").samples)  # same weights, same greedy tokens
    out = cold.act(obs)
    cold_eval, warm_eval = cold.evaluate(obs, out.samples), warm.evaluate(obs, out.samples)
    torch.testing.assert_close(cold_eval.log_prob, out.log_prob, atol=1e-5, rtol=1e-6)
    assert torch.all(cold_eval.entropy < warm_eval.entropy)
    assert torch.all(cold.evaluate(obs, greedy).log_prob > warm.evaluate(obs, greedy).log_prob)
    # near freezing, the rollout's tokens are the greedy ones (this random model's logits are nearly flat)
    frozen = tiny(env, {"sampling_temperature": 1e-4}, family=family)
    torch.manual_seed(1)
    agreement = {
        name: (policy.act(obs).samples == greedy).float().mean().item()
        for name, policy in (("frozen", frozen), ("warm", warm))
    }
    assert agreement["frozen"] > 0.9 > 0.1 > agreement["warm"], agreement
    # SFT's cross-entropy stays upstream's (temperature 1), whatever RL samples with
    targets = torch.zeros(4, CHUNK[family], env.env_spec.action.dim)
    valid = torch.ones(4, CHUNK[family])
    torch.testing.assert_close(
        cold.imitation_loss(obs, targets, valid), warm.imitation_loss(obs, targets, valid)
    )


def test_a_temperature_is_not_negative_and_a_chain_must_have_something_random():
    with pytest.raises(ValueError, match=r"sampling_temperature must be >= 0, got -0\.5"):
        VLAConfig(sampling_temperature=-0.5)
    with pytest.raises(
        ValueError, match=r"sampling_temperature=0 with flow_noise_level=0 leaves nothing random"
    ):
        VLAConfig(sampling_temperature=0.0, flow_noise_level=0.0)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_token_families_refuse_a_temperature_of_zero_in_one_line(env, family):
    with pytest.raises(ValueError, match=r"sampling_temperature=0 is for the flow families.*needs T > 0"):
        tiny(env, {"sampling_temperature": 0.0}, family=family)


@pytest.mark.parametrize("ratio_level", ["chunk", "token"])
@pytest.mark.parametrize("family", FAMILIES)
def test_a_grpo_step_moves_log_probs_in_the_sign_of_the_advantages(env, family, ratio_level):
    policy = tiny(env, value_head=False, family=family)
    obs = observations(env)
    out = policy.act(obs)
    grpo = GRPO(
        policy,
        GRPOConfig(
            group_size=2, learning_rate=1e-3, update_epochs=1, num_minibatches=1, ratio_level=ratio_level
        ),
    )
    grpo.update(one_decision_batch(obs, out, [1.0, 0.0, 0.0, 1.0]))
    moved = policy.evaluate(obs, out.samples).log_prob.detach() - out.log_prob
    assert moved[[0, 3]].mean() > 0 > moved[[1, 2]].mean(), moved


@pytest.mark.parametrize("ratio_level", ["chunk", "token"])
@pytest.mark.parametrize("family", FAMILIES)
def test_a_ppo_step_moves_log_probs_in_the_sign_of_the_advantages(env, family, ratio_level):
    policy = tiny(env, family=family)
    obs = observations(env)
    out = policy.act(obs)
    ppo = PPO(
        policy,
        PPOConfig(
            learning_rate=1e-3, update_epochs=1, num_minibatches=1, value_coef=0.0, ratio_level=ratio_level
        ),
    )
    ppo.update(one_decision_batch(obs, out, [2.0, -2.0, -2.0, 2.0]))
    moved = policy.evaluate(obs, out.samples).log_prob.detach() - out.log_prob
    assert moved[[0, 3]].mean() > 0 > moved[[1, 2]].mean(), moved


def test_lora_goes_on_the_llama_and_the_vision_backbone_is_frozen(env):
    full = tiny(env, value_head=False)
    trainable_full = {n for n, p in full.named_parameters() if p.requires_grad}
    assert not any("vision_backbone" in n for n in trainable_full)
    lora = tiny(env, value_head=False, vla={"lora_rank": 4})
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable if "lora_A" in n}
    assert adapted == LLAMA_PROJECTIONS
    assert all("language_model" in n for n in trainable if "lora_" in n)
    assert not any("vision_backbone" in n for n in trainable)
    assert not any("language_model" in n and "lora_" not in n for n in trainable)
    # With the vision backbone trainable, what upstream stores but never runs stays frozen.
    vision = tiny(env, value_head=False, vla={"train_vision": True})
    frozen = {n for n, p in vision.named_parameters() if not p.requires_grad}
    assert "model.vision_backbone.featurizer.blocks.1.attn.qkv.weight" in frozen
    assert "model.vision_backbone.fused_featurizer.attn_pool.latent" in frozen
    assert "model.vision_backbone.featurizer.norm.weight" in frozen
    assert "model.vision_backbone.featurizer.blocks.0.attn.qkv.weight" not in frozen


@pytest.mark.parametrize("family", FAMILIES)
def test_imitation_makes_the_recorded_action_the_greedy_one(env, family):
    policy = tiny(env, value_head=False, family=family)
    obs = observations(env)
    adim = env.env_spec.action.dim
    targets = torch.linspace(-0.8, 0.8, adim).expand(4, CHUNK[family], adim)
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=3e-3)
    wanted = policy.target_tokens(targets)
    before = (policy.act(obs, "greedy").samples.flatten(1).long() == wanted).float().mean().item()
    # OFT's placeholders are all zeros: its positions differ by their rotary phase alone, which a
    # random tiny Llama takes ~125-200 steps to tell apart (measured: 25 steps gave 1/7 of the tokens;
    # 150 gave 13/14 on MuJoCo 4.0's frames, 250 all).
    for _ in range(25 if family == "openvla" else 250):
        loss = policy.imitation_loss(obs, targets, torch.ones(4, CHUNK[family]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = (policy.act(obs, "greedy").samples.flatten(1).long() == wanted).float().mean().item()
    print(f"tiny:{family}: greedy tokens equal to the recorded ones {before:.2f} -> {after:.2f}")
    assert before < 0.2 and after == 1.0
    expected = policy.env_actions(wanted.reshape(4, CHUNK[family], adim).float())
    torch.testing.assert_close(policy.act(obs, "greedy").actions, expected)


@pytest.mark.parametrize("family", FAMILIES)
def test_save_then_load_gives_the_same_actions(env, tmp_path, family):
    policy = tiny(env, family=family)
    policy.save(tmp_path / "p")
    loaded = load_policy(tmp_path / "p")
    obs = observations(env)
    assert torch.equal(loaded.act(obs, "greedy").samples, policy.act(obs, "greedy").samples)


def reference_policy(env, **vla):
    from protos import EnvSpec

    spec = env.env_spec.to_dict()
    spec["cameras"] = [{"name": "base", "height": 224, "width": 224, "fps": 10.0}]
    spec["action"] = {**spec["action"], "low": [-10.0] * 7, "high": [10.0] * 7}
    cfg = VLAConfig(checkpoint=str(REFERENCE / "model"), dims=str(REFERENCE / "tiny_dims.json"), **vla)
    return make_policy(
        EnvSpec.from_dict(spec), PolicyConfig(kind="vla", cameras=["base"], chunk_size=1, vla=cfg)
    )


@pytest.mark.skipif(not REFERENCE.is_dir(), reason=f"no reference fixtures at {REFERENCE}")
def test_greedy_on_the_reference_checkpoint_is_upstreams_predict_action(env):
    from safetensors.torch import load_file

    policy = reference_policy(env)
    image = load_file(str(REFERENCE / "inputs.safetensors"))["image"]
    expected = load_file(str(REFERENCE / "expected.safetensors"))
    obs = {"state": torch.zeros(1, env.env_spec.state_dim), "images": {"base": image[None]},
           "instruction": ["pick up the red cube and put it on the plate"]}  # fmt: skip
    out = policy.act(obs, "greedy")
    assert out.samples[0, 0].long().tolist() == expected["action_token_ids"].tolist()
    torch.testing.assert_close(out.actions[0, 0].double(), expected["actions"], atol=1e-6, rtol=0)


@pytest.mark.skipif(not REFERENCE.is_dir(), reason=f"no reference fixtures at {REFERENCE}")
def test_bad_configs_say_what_is_wrong_in_one_line(env):
    from policies.vla.weights import CheckpointError

    with pytest.raises(
        CheckpointError, match=r"no norm_stats for unnorm_key 'bridge'; keys: \['fixture_robot'\]"
    ):
        reference_policy(env, unnorm_key="bridge")
    cfg = VLAConfig(checkpoint=str(REFERENCE / "model"), dims=str(REFERENCE / "tiny_dims.json"))
    with pytest.raises(CheckpointError, match="its action statistics have 7 dims, the env's action has 3"):
        from protos import EnvSpec

        spec = env.env_spec.to_dict()
        names = spec["action"]["names"][:3]
        spec["action"] = {**spec["action"], "names": names, "low": [-1.0] * 3, "high": [1.0] * 3}
        make_policy(
            EnvSpec.from_dict(spec), PolicyConfig(kind="vla", cameras=["front"], chunk_size=1, vla=cfg)
        )
    for overrides, message in [
        ({"chunk_size": 2}, r"set policy\.chunk_size=1"),
        ({"cameras": ["front", "wrist"]}, "OpenVLA sees one camera"),
    ]:
        with pytest.raises(ValueError, match=message):
            make_policy(env.env_spec, PolicyConfig(**{"kind": "vla", "cameras": ["front"], "chunk_size": 1,
                                                      "vla": VLAConfig(backbone="tiny:openvla"), **overrides}))  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
def test_train_runs_grpo_on_it_unchanged_and_saves_a_loadable_policy(tmp_path, family):
    from trainer.checkpoint import POLICY_DIR, latest_checkpoint
    from trainer.configs import load_config
    from trainer.runner import Runner

    env_yaml = "env.kwargs={cameras: [front], image_height: 64, image_width: 64, action_rotation: false, max_episode_steps: 4}"
    cfg = load_config("grpo_reach", [
        "policy.kind=vla", "policy.cameras=[front]", f"policy.vla.backbone=tiny:{family}",
        f"policy.chunk_size={CHUNK[family]}", "policy.value_head=false", "env.id=rlinf/FrankaReach-v0",
        "env.num_envs=4", "env.backend=inline", env_yaml, "algo.group_size=2", "run.eval_every=0", "run.video=false",
        "run.final_eval_episodes=0", "run.total_env_steps=16", f"run.output_dir={tmp_path}",
    ])  # fmt: skip
    Runner(cfg).run()
    saved = load_policy(latest_checkpoint(tmp_path) / POLICY_DIR)
    assert isinstance(saved, OpenVLAPolicy) and saved.parallel == (family == "openvla-oft")
