"""Naming devices, and moving training state between them. The CUDA half is ``test_gpu.py``."""

from __future__ import annotations

import pytest
import torch

from policies import PolicyConfig, make_policy
from sim_envs import make_vector
from trainer.algorithms.common import collect_on_policy
from trainer.configs import ConfigError
from trainer.devices import optimizer_to, resolve_device, to_cpu


def test_auto_picks_the_gpu_only_when_torch_sees_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("cuda", r"run.device='cuda', but torch .* sees no GPU; use run.device=cpu or auto"),
        ("cuda:1", "sees no GPU"),
        ("tpu", "expected cpu, cuda, cuda:N or auto"),
        ("mps", "expected cpu, cuda, cuda:N or auto"),
    ],
)
def test_a_device_that_is_not_there_is_refused_with_one_line(monkeypatch, name, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=message):
        resolve_device(name)


def test_to_cpu_copies_so_the_worker_can_keep_training():
    weights = {"layer": {"w": torch.ones(3)}, "steps": [torch.zeros(1)], "name": "policy"}
    copied = to_cpu(weights)
    weights["layer"]["w"].add_(1.0)
    assert torch.equal(copied["layer"]["w"], torch.ones(3)) and copied["name"] == "policy"
    assert isinstance(copied["steps"], list)


def test_optimizer_state_moves_but_its_step_count_stays_where_torch_wants_it():
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(layer.parameters())
    layer(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    optimizer_to(optimizer, torch.device("meta"))  # a second device that every machine has
    state = next(iter(optimizer.state.values()))
    assert state["exp_avg"].device.type == "meta" and state["exp_avg_sq"].device.type == "meta"
    assert state["step"].device.type == "cpu"  # non-capturable Adam keeps its step on the CPU


def test_a_trajectory_is_stored_on_the_cpu_and_moved_whole_to_the_learner():
    vector = make_vector("rlinf/FrankaReach-v0", 2, backend="inline", max_episode_steps=4)
    try:
        policy = make_policy(vector.spec, PolicyConfig(hidden_sizes=[16]))
        batch = collect_on_policy(vector, policy, 0, 4, [])
    finally:
        vector.close()
    moved = batch.to(torch.device("cpu"))
    assert isinstance(moved.obs["state"], torch.Tensor) and moved.obs["state"].shape[:2] == (4, 2)
    assert torch.equal(moved.flat_obs()["state"], batch.flat_obs()["state"])
    assert moved.env_steps == batch.env_steps and moved.finished == batch.finished
