"""Shared fixtures. ``sim_envs`` is imported first so that MuJoCo picks a headless GL backend."""

import fcntl
import os
import tempfile
from pathlib import Path

import pytest

import sim_envs  # noqa: F401  (selects MUJOCO_GL before anything imports mujoco)


def pytest_collection_modifyitems(config, items):
    # Under pytest-xdist (``-n auto --dist loadfile``: a file to a worker, so a file's tests share its
    # fixtures and fixed names, like the shaped-link test's network namespace), files with slow tests
    # go first, so that no minute-long test starts last and runs alone at the end.
    if "PYTEST_XDIST_WORKER" in os.environ:
        slow_files = {item.path for item in items if "slow" in item.keywords}
        items.sort(key=lambda item: item.path not in slow_files)  # stable: a file's order holds
    skip_gpu_tests_without_a_gpu(items)


def skip_gpu_tests_without_a_gpu(items):
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


@pytest.fixture(autouse=True)
def _share_the_machine(request):
    """Under xdist, a test marked ``alone`` runs while no other worker runs a test (an exclusive lock
    on a file of this test run; every other test holds it shared). For tests whose real-time agent
    asserts exact motion: a 20 Hz tick stalled by the other worker would hold the arm mid-trace."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # one process: nothing to share
        yield
        return
    mode = fcntl.LOCK_EX if request.node.get_closest_marker("alone") else fcntl.LOCK_SH
    with open(Path(tempfile.gettempdir()) / f"rlinf-tests-{run}.lock", "a") as lock:
        fcntl.flock(lock, mode)
        yield
