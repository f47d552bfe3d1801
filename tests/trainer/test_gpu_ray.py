"""Ray workers on a GPU bundle: collocated offload frees the GPU between phases, and the off-policy
learner trains on its GPU share. Marked ``gpu`` (skipped where torch sees no GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import ray
import torch

import sim_envs
from policies import make_policy
from trainer.configs import load_config
from trainer.configs.loader import algorithm_config
from trainer.distributed.session import build_distributed

from .test_gpu import REACH

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


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
