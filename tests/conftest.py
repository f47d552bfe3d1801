"""Shared fixtures. ``sim_envs`` is imported first so that MuJoCo picks a headless GL backend."""

import pytest

import sim_envs  # noqa: F401  (selects MUJOCO_GL before anything imports mujoco)


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests need a CUDA GPU: skipped, with the reason, on machines without one (like CI)."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `pytest -m gpu` on a GPU box)")
    for item in gpu_items:
        item.add_marker(skip)
