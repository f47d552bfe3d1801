"""VLAs on a GPU: both families (tiny:openvla-oft, tiny:pi0) act, evaluate and learn on ``cuda`` in float32 and bfloat16, a bfloat16
backbone takes less GPU memory, a checkpoint saved there loads on a CPU, and GRPO trains in process
with ``run.device=cuda``. Marked ``gpu`` (skipped where torch sees no GPU)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from policies import load_policy
from tests.policies.test_vla_common import observations, one_decision_batch, tiny
from trainer.algorithms.grpo import GRPO, GRPOConfig
from trainer.configs import load_config
from trainer.runner import Runner

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def env():
    import sim_envs

    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=("front",), image_height=64, image_width=64)
    yield env
    env.close()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", ["openvla-oft", "pi0"])
def test_a_vla_acts_evaluates_and_learns_on_the_gpu(env, family, dtype):
    policy = tiny(env, family, vla={"dtype": dtype}, value_head=False).to(CUDA)
    assert next(policy.model.parameters()).device.type == "cuda"
    obs = observations(env)
    out = policy.act(obs)
    low, high = env.env_spec.action.low_array(), env.env_spec.action.high_array()
    actions = out.actions.cpu().numpy()
    assert np.all(actions >= low - 1e-6) and np.all(actions <= high + 1e-6)
    tolerance = 1e-3 if dtype == "float32" else 5e-2  # bfloat16 keeps 8 bits of mantissa
    evaluation = policy.evaluate(obs, out.samples)
    torch.testing.assert_close(evaluation.log_prob, out.log_prob, atol=tolerance, rtol=0)
    grpo = GRPO(policy, GRPOConfig(group_size=2, learning_rate=1e-5, update_epochs=1, num_minibatches=1))
    grpo.update(one_decision_batch(obs, out, [1.0, 0.0, 0.0, 1.0]).to(CUDA))  # advantages +, -, -, +
    moved = policy.evaluate(obs, out.samples).log_prob.detach() - out.log_prob
    assert moved[[0, 3]].mean() > 0 > moved[[1, 2]].mean(), moved


def test_a_bfloat16_backbone_takes_less_gpu_memory_than_float32(env):
    def allocated(dtype: str) -> int:
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        policy = tiny(env, "openvla-oft", vla={"dtype": dtype}).to(CUDA)
        used = torch.cuda.memory_allocated() - before
        del policy
        return used

    full, half = allocated("float32"), allocated("bfloat16")
    assert half < 0.75 * full, (half, full)  # the model halves; the value head stays float32


def test_a_checkpoint_saved_on_the_gpu_loads_on_the_cpu_and_acts_alike(env, tmp_path):
    policy = tiny(env, "openvla-oft").to(CUDA)
    obs = observations(env)
    policy.update_normalizers(obs)
    policy.save(tmp_path / "policy")
    loaded = load_policy(tmp_path / "policy")
    assert all(t.device.type == "cpu" for t in loaded.state_dict().values())
    on_gpu = policy.act(obs, "greedy").actions.cpu()
    on_cpu = loaded.act(obs, "greedy").actions
    assert (on_gpu - on_cpu).abs().max() < 0.05  # a bin apart at most where TF32 tips an argmax


def test_grpo_on_a_vla_trains_in_process_on_the_gpu(tmp_path):
    out = tmp_path / "grpo"
    config = load_config("vla_grpo_pick_color", [
        "env.num_envs=4", "algo.group_size=2", "run.total_env_steps=64", "run.eval_every=0",
        "run.final_eval_episodes=2", "run.video=false", "run.device=cuda", f"run.output_dir={out}",
        "env.kwargs.max_episode_steps=8",
    ])  # fmt: skip
    Runner(config).run()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] == 64 and np.isfinite(rows[-1]["train/policy_loss"])
    assert json.loads((out / "final_eval.json").read_text())["episodes"] == 2
