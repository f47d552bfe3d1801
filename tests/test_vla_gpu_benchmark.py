"""``benchmarks/vla_gpu.py`` (the real-size π0 on a GPU) run at the fixtures' tiny size on the CPU:
the random checkpoint it writes is a π0 in openpi's layout that our loader takes whole, and its PPO
arms (LoRA with offload, full finetuning without) update the actor and report their figures."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from policies import make_policy
from policies.vla.pi.checkpoint import read_checkpoint
from policies.vla.pi.dims import PiDims, with_dims_file
from policies.vla.pi.models import build_flow_model
from protos.batch import stack_obs

ROOT = Path(__file__).resolve().parents[1]
DIMS = ROOT.parent / "shared" / "vla_reference" / "pi0" / "tiny_dims.json"
CPU = torch.device("cpu")


def load_benchmark():
    spec = importlib.util.spec_from_file_location("vla_gpu_benchmark", ROOT / "benchmarks" / "vla_gpu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return load_benchmark()


@pytest.fixture(scope="module")
def env(bench):
    import sim_envs

    env = sim_envs.make(bench.ENV, cameras=("front",), image_height=64, image_width=64)
    yield env
    env.close()


@pytest.fixture(scope="module")
def checkpoint(bench, env, tmp_path_factory):
    dims = with_dims_file(PiDims(family="pi0"), DIMS)
    folder = tmp_path_factory.mktemp("vla_gpu") / "pi0_random"
    count = bench.write_random_checkpoint(folder, dims, env.env_spec.state_dim, env.env_spec.action.dim)
    return folder, dims, count


def test_the_random_checkpoint_is_an_openpi_pi0_our_loader_takes_whole(bench, env, checkpoint):
    folder, dims, count = checkpoint
    read = read_checkpoint(folder, DIMS)
    assert (read.layout, read.family, read.dims) == ("openpi", "pi0", dims)
    assert count == sum(p.numel() for p in build_flow_model(dims).parameters())
    policy = make_policy(env.env_spec, bench.policy_config(folder, str(DIMS), dims.chunk_size, 0))
    assert {p.dtype for p in policy.model.parameters()} == {torch.bfloat16}
    obs = stack_obs([env.reset(seed=0)[0]])
    actions = policy.act(obs, "greedy").actions
    assert actions.shape == (1, dims.chunk_size, env.env_spec.action.dim) and torch.isfinite(actions).all()


@pytest.mark.slow
def test_the_ppo_arms_update_the_actor_and_report_their_figures(bench, env, checkpoint, monkeypatch):
    folder, dims, _ = checkpoint
    args = argparse.Namespace(dims=str(DIMS), chunk=dims.chunk_size, rounds=1)
    obs = stack_obs([env.reset(seed=i)[0] for i in range(2)])
    updated = []
    real_update = bench.PPO.update

    def watched_update(ppo, batch):
        before = [p.detach().clone() for p in ppo.policy.parameters() if p.requires_grad]
        metrics = real_update(ppo, batch)
        after = [p for p in ppo.policy.parameters() if p.requires_grad]
        updated.append(any(not torch.equal(b, a.detach()) for b, a in zip(before, after, strict=True)))
        return metrics

    monkeypatch.setattr(bench.PPO, "update", watched_update)
    lora = bench.ppo_arm(args, folder, env, obs, lora_rank=4, offload=True, device=CPU)
    full = bench.ppo_arm(args, folder, env, obs, lora_rank=0, offload=False, device=CPU)
    assert updated == [True] * 4  # rounds + 1 updates per arm, each moved the trainable weights
    assert lora["trainable_parameters"] < full["trainable_parameters"]
    assert len(lora["update_s"]) == 2 and lora["update_s_median"] > 0 and lora["swap_s_median"] >= 0
    assert "swap_s_median" not in full
