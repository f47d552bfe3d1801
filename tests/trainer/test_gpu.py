"""Training on a GPU: in-process PPO and image SAC on ``cuda``, CPU/GPU agreement, Ray workers
placed on a GPU bundle, and collocated offload freeing the GPU between phases.

Marked ``gpu``: they run where torch sees a GPU (``pytest -m gpu`` on a GPU box) and are skipped
elsewhere (the CI machine has none).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import ray
import torch

import sim_envs
from policies import PolicyConfig, load_policy, make_policy
from trainer.configs import load_config
from trainer.configs.loader import algorithm_config
from trainer.distributed.session import build_distributed
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


def ray_trainer(preset: str, overrides: list[str]):
    config = load_config(preset, overrides)
    policy = make_policy(sim_envs.make(config.env.id, **config.env.kwargs).env_spec, config.policy)
    return build_distributed(config, policy, algorithm_config(config))


def test_collocated_offload_gives_each_phase_the_gpu_to_itself(local_ray):
    trainer = ray_trainer(
        "ppo_reach",
        [
            *REACH,
            "cluster.placement=collocated",
            "cluster.bundles=[{CPU: 2, GPU: 1}]",
            "cluster.offload=true",
        ],
    )
    try:
        assert ray.get(trainer.actor.device_name.remote()) == "cuda"
        assert ray.get(trainer.rollout.device_name.remote()) == "cuda"
        result = trainer.iterate(None, 0)
        assert result.env_steps == 40 and result.metrics["offload_s"] > 0
        # After an iteration both models wait in host memory: the actor's since its update, the
        # rollout's since collection ended.
        assert ray.get(trainer.actor.device_memory.remote()) == 0
        assert ray.get(trainer.rollout.device_memory.remote()) == 0
        ray.get(trainer.actor.onload.remote())
        assert ray.get(trainer.actor.device_memory.remote()) > 0  # model + Adam moments back on the GPU
        ray.get(trainer.actor.offload.remote())
        second = trainer.iterate(None, 1)  # the optimiser state survived the round trips
        assert np.isfinite(second.metrics["policy_loss"]) and second.metrics["policy_lag"] == 0.0
        actor_weights, _ = ray.get(trainer.actor.weights.remote())
        for key, value in trainer.policy.state_dict().items():
            assert torch.equal(actor_weights[key], value), key  # the driver holds the newest weights
    finally:
        trainer.close()


def test_the_off_policy_learner_trains_on_its_gpu_share(local_ray):
    sac = [
        *REACH, "algo.learning_starts=20", "algo.batch_size=32", "algo.critic_hidden=[32]",
        "cluster.placement=disaggregated", "cluster.bundles=[{CPU: 1}, {CPU: 0.5, GPU: 0.5}, {CPU: 0.5, GPU: 0.5}]",
    ]  # fmt: skip
    trainer = ray_trainer("sac_reach", sac)
    try:
        assert ray.get(trainer.learner.device_name.remote()) == "cuda"
        assert ray.get(trainer.rollout.device_name.remote()) == "cuda"
        assert ray.get(trainer.envs[0].device_name.remote()) == "cpu"
        trainer.iterate(None, 0)
        result = trainer.iterate(None, 1)
        assert result.metrics["updates"] == 31.0  # utd 0.5 per 2-step add, from the add reaching 20
        state = trainer.state_dict()
        assert state["algorithm"]["log_alpha"].device.type == "cpu"  # checkpoints leave on the CPU
    finally:
        trainer.close()
