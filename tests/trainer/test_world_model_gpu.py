"""The world model on a GPU: trained on ``cuda`` (``run.device``), saved as CPU tensors, and its env
stepped on ``cuda`` as on the CPU. Marked ``gpu`` (skipped where torch sees no GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sim_envs
from policies.world_model.env import WorldModelVectorEnv
from policies.world_model.model import load_world_model
from trainer.expert_demos import DemoConfig, record_expert_demos
from trainer.world_model_training import WorldModelTrainConfig, train_world_model

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
STATE_ENV = {"cameras": [], "privileged_state": True, "action_rotation": False, "max_episode_steps": 30}


def trained_on_cuda(tmp_path, env_kwargs: dict, cameras: list[str], updates: int):
    demos = record_expert_demos(DemoConfig("rlinf/FrankaReach-v0", 6, str(tmp_path / "demos"), seed=0,
                                           only_successful=False, env_kwargs=env_kwargs), progress=False)  # fmt: skip
    spec = sim_envs.make("rlinf/FrankaReach-v0", **env_kwargs).env_spec
    cfg = WorldModelTrainConfig(dataset=str(demos.root), cameras=cameras, updates=updates, batch_size=32,
                                hidden=64, latent_dim=16)  # fmt: skip
    metrics = train_world_model(cfg, spec, tmp_path / "run", device="cuda")
    return tmp_path / "run" / "world_model", metrics, spec


def test_a_world_model_trains_on_the_gpu_and_loads_on_the_cpu(tmp_path):
    checkpoint, metrics, _ = trained_on_cuda(tmp_path, STATE_ENV, [], 300)
    assert metrics["loss_last"] < 0.5 * metrics["loss_first"]
    assert metrics["state_error_5"] < metrics["state_error_copy_last_5"]
    model, _ = load_world_model(checkpoint)
    assert all(t.device.type == "cpu" for t in model.state_dict().values())


def test_the_world_model_env_steps_on_the_gpu_as_on_the_cpu(tmp_path):
    checkpoint, _, spec = trained_on_cuda(tmp_path, STATE_ENV, [], 100)
    on_cpu = WorldModelVectorEnv(str(checkpoint), num_envs=16, max_episode_steps=8, device="cpu")
    on_gpu = WorldModelVectorEnv(str(checkpoint), num_envs=16, max_episode_steps=8, device="cuda")
    assert on_gpu.z.device.type == "cuda"
    first_cpu, _ = on_cpu.reset(seed=5)
    first_gpu, _ = on_gpu.reset(seed=5)
    np.testing.assert_allclose(first_gpu["state"], first_cpu["state"], rtol=1e-5, atol=1e-5)
    actions = np.random.default_rng(0).uniform(-1, 1, (3, 16, 4, spec.action.dim)).astype(np.float32)
    for chunk in actions:
        a, b = on_cpu.chunk_step(chunk), on_gpu.chunk_step(chunk)
        assert isinstance(b.obs["state"], np.ndarray)  # the contract's numpy, whatever the device
        np.testing.assert_allclose(b.obs["state"], a.obs["state"], rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(b.rewards, a.rewards, rtol=1e-3, atol=1e-3)
        np.testing.assert_array_equal(b.truncated, a.truncated)
        np.testing.assert_array_equal(b.valid, a.valid)


def test_camera_frames_go_through_the_latent_on_the_gpu(tmp_path):
    env = {**STATE_ENV, "cameras": ["front"], "image_height": 32, "image_width": 32}
    checkpoint, metrics, spec = trained_on_cuda(tmp_path, env, ["front"], 30)
    assert np.isfinite(metrics["frame_error_1"])
    venv = WorldModelVectorEnv(str(checkpoint), num_envs=4, device="cuda")
    obs = venv.chunk_step(np.zeros((4, 2, spec.action.dim), np.float32)).obs
    assert obs["images"]["front"].shape == (4, 32, 32, 3) and obs["images"]["front"].dtype == np.uint8
    assert torch.cuda.memory_allocated() > 0
