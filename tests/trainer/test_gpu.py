"""Training on a GPU, in process: PPO and image SAC on ``cuda``, and CPU/GPU agreement (Ray workers on
a GPU bundle are in ``test_gpu_ray.py``).

Marked ``gpu``: they run where torch sees a GPU (``pytest -m gpu`` on a GPU box) and are skipped
elsewhere (the CI machine has none).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import sim_envs
from policies import PolicyConfig, load_policy, make_policy
from trainer.configs import load_config
from trainer.runner import Runner

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
CUDA = torch.device("cuda")
REACH = [
    "env.id=rlinf/FrankaReach-v0", "env.num_envs=4", "env.backend=inline",
    "env.kwargs={cameras: [], action_rotation: false, max_episode_steps: 10}", "policy.hidden_sizes=[32]",
    "run.eval_every=2", "run.eval_episodes=2", "run.video=false", "run.checkpoint_every=2",
]  # fmt: skip
IMAGE_SAC = [
    "env.num_envs=2", "run.eval_every=0", "run.checkpoint_every=2", "run.total_env_steps=80",
    "env.kwargs={cameras: [front], image_height: 64, image_width: 64, action_rotation: false, "
    "privileged_state: false, max_episode_steps: 20}",
    "algo.learning_starts=20", "algo.batch_size=16", "algo.utd_ratio=0.5",
]  # fmt: skip


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_ppo_trains_in_process_on_the_gpu_and_its_checkpoint_loads_on_a_cpu(tmp_path):
    out = tmp_path / "ppo"
    config = load_config(
        "ppo_reach", [*REACH, "run.device=cuda", "run.total_env_steps=80", f"run.output_dir={out}"]
    )
    Runner(config).run()
    rows = metrics(out)
    assert rows[-1]["env_steps"] == 80 and np.isfinite(rows[-1]["train/policy_loss"])
    assert "eval/return_mean" in rows[-1]  # greedy evaluation ran with the policy on the GPU
    loaded = load_policy(out / "checkpoints" / "step_80" / "policy")  # on this CPU
    assert all(t.device.type == "cpu" for t in loaded.state_dict().values())


def test_image_sac_updates_on_the_gpu(tmp_path):
    out = tmp_path / "sac"
    config = load_config("sac_reach_image", [*IMAGE_SAC, "run.device=cuda", f"run.output_dir={out}"])
    Runner(config).run()
    rows = metrics(out)
    assert rows[-1]["env_steps"] == 80 and np.isfinite(rows[-1]["train/critic_loss"])
    assert rows[-1]["train/buffer_size"] == 80


def test_a_policy_on_the_gpu_computes_what_it_computes_on_the_cpu():
    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=["front"], image_height=64, image_width=64)
    spec = env.env_spec
    env.close()
    torch.manual_seed(0)
    cpu = make_policy(spec, PolicyConfig(kind="cnn", cameras=["front"], hidden_sizes=[64]))
    gpu = make_policy(spec, PolicyConfig(kind="cnn", cameras=["front"], hidden_sizes=[64])).to(CUDA)
    gpu.load_state_dict(cpu.state_dict())
    generator = np.random.default_rng(0)
    obs = {
        "state": generator.normal(size=(8, spec.state_dim)).astype(np.float32),
        "images": {"front": generator.integers(0, 256, size=(8, 64, 64, 3), dtype=np.uint8)},
    }
    samples = torch.randn(8, 1, spec.action.dim)
    on_cpu, on_gpu = cpu.evaluate(obs, samples), gpu.evaluate(obs, samples)
    assert on_gpu.log_prob.device.type == "cuda"
    # cuDNN convolutions may use TF32 on Ampere and later: agreement to about 1e-3, not bit for bit
    relative = (on_gpu.log_prob.cpu() - on_cpu.log_prob).norm() / on_cpu.log_prob.norm()
    assert float(relative) < 1e-2
    assert torch.allclose(on_gpu.value.cpu(), on_cpu.value, rtol=1e-2, atol=1e-3)
