"""Core claims: each vector-env worker gets a core no other worker holds, and a dead holder's core
is free again at once."""

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from sim_envs import core_claims, vector
from sim_envs.core_claims import CLAIMS_DIR_ENV, allowed_cores, claim_core
from sim_envs.vector import SimVectorEnv

CONFIG = {"max_episode_steps": 20}


@pytest.fixture
def claims(tmp_path, monkeypatch):
    """A claims folder of this test's own, which the workers it starts inherit."""
    monkeypatch.setenv(CLAIMS_DIR_ENV, str(tmp_path))
    return tmp_path


def test_claims_go_highest_core_first_and_never_twice(claims):
    first, second = claim_core([0, 1, 2]), claim_core([0, 1, 2])
    third, fourth = claim_core([0, 1, 2]), claim_core([0, 1, 2])
    assert (first.core, second.core, third.core) == (2, 1, 0)
    assert fourth is None  # every core is held
    second.release()
    again = claim_core([0, 1, 2])
    assert again.core == 1
    for claim in (first, third, again):
        claim.release()


def test_a_core_held_by_a_process_that_dies_is_free_again(claims):
    holder = subprocess.Popen(
        [sys.executable, "-c", "from sim_envs.core_claims import claim_core; import sys, time;"
         "claim = claim_core([5]); print(claim.core, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "5"
        assert claim_core([5]) is None  # held by the live process
        holder.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel drops the lock
        holder.wait(timeout=10)
        claim = claim_core([5])
        assert claim is not None and claim.core == 5
        claim.release()
    finally:
        holder.kill()
        holder.stdout.close()


def worker_affinity(venv: SimVectorEnv) -> list[set[int]]:
    return [os.sched_getaffinity(proc.pid) for proc in venv._procs]


def test_pinned_workers_take_distinct_free_cores_and_step_as_unpinned_ones(claims):
    cores = sorted(allowed_cores())
    pinned = SimVectorEnv("rlinf/FrankaReach-v0", 4, backend="subprocess", num_workers=2,
                          env_config=CONFIG, pin_workers=True)  # fmt: skip
    unpinned = SimVectorEnv("rlinf/FrankaReach-v0", 4, backend="subprocess", num_workers=2,
                            env_config=CONFIG, pin_workers=False)  # fmt: skip
    try:
        taken = [core for core in pinned.worker_cores if core is not None]
        expected = cores[-min(2, len(cores)) :]  # the highest free cores, one worker each
        assert sorted(taken) == expected
        for core, affinity in zip(pinned.worker_cores, worker_affinity(pinned)):
            assert affinity == ({core} if core is not None else set(cores))
        assert unpinned.worker_cores == [None, None]
        assert worker_affinity(unpinned) == [set(cores), set(cores)]
        np.testing.assert_allclose(pinned.reset(seed=1)[0]["state"], unpinned.reset(seed=1)[0]["state"])
        actions = np.random.default_rng(0).uniform(-1, 1, (4, 3, pinned.spec.action.dim))
        a, b = pinned.chunk_step(actions), unpinned.chunk_step(actions)
        np.testing.assert_allclose(a.obs["state"], b.obs["state"])
        np.testing.assert_allclose(a.rewards, b.rewards)
    finally:
        pinned.close()
        unpinned.close()


def test_workers_stay_unpinned_where_another_trainer_holds_every_core(claims):
    held = [claim_core([core]) for core in allowed_cores()]
    try:
        venv = SimVectorEnv("rlinf/FrankaReach-v0", 2, backend="subprocess", num_workers=2,
                            env_config=CONFIG, pin_workers=True)  # fmt: skip
        try:
            assert venv.worker_cores == [None, None]
            assert worker_affinity(venv) == [allowed_cores()] * 2
        finally:
            venv.close()
    finally:
        for claim in held:
            claim.release()


def test_a_closed_env_frees_its_cores_for_the_next(claims):
    for _ in range(2):  # the second env finds the first one's cores free again
        venv = SimVectorEnv("rlinf/FrankaReach-v0", 1, backend="subprocess", num_workers=1,
                            env_config=CONFIG, pin_workers=True)  # fmt: skip
        assert venv.worker_cores == [max(allowed_cores())]
        venv.close()


@pytest.mark.parametrize(
    ("cores", "workers", "pins"), [({0, 1}, 2, True), ({0, 1}, 1, False), ({3}, 2, False)]
)
def test_workers_are_pinned_by_default_only_where_there_is_one_per_core(
    claims, monkeypatch, cores, workers, pins
):
    monkeypatch.setattr(vector, "allowed_cores", lambda: cores)
    venv = SimVectorEnv(
        "rlinf/FrankaReach-v0", 2, backend="subprocess", num_workers=workers, env_config=CONFIG
    )
    try:
        assert venv.pin_workers is pins
    finally:
        venv.close()


def test_an_unwritable_claims_folder_leaves_the_worker_unpinned(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(CLAIMS_DIR_ENV, str(blocker / "claims"))  # a folder inside a file
    assert claim_core([0]) is None
    assert core_claims.pin_to_a_free_core() is None
    assert os.sched_getaffinity(0) == allowed_cores()
