"""ManiSkill3 behind the env contract (``rlinf/ManiSkill-v0``), on SAPIEN's CPU physics with Mesa's
Vulkan, stepped in its own venv's workers: the env checker and reset rules there (state and a
camera), the vector contract and PPO from the main venv through ``env.python``, one-line refusals.
The GPU-batched adapter (``rlinf/ManiSkillGPU-v0``) on the CPU physics's one env, in that venv."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

import sim_envs
from tests.sim_envs.suite_helpers import ppo_returns_before_and_after, run_suite_checks, suite_python


@pytest.fixture(scope="module")
def side_python() -> str:
    return suite_python("maniskill")


@pytest.mark.slow
def test_the_env_checker_passes_on_state_and_camera_in_maniskills_venv(side_python):
    kwargs = {"task": "PushCube-v1", "obs_mode": "rgb", "image_size": 32, "max_episode_steps": 12}
    found = run_suite_checks(side_python, "rlinf/ManiSkill-v0", kwargs, "base_camera")
    spec = found["spec"]
    assert spec["name"] == "rlinf/ManiSkill-v0" and spec["instruction"] == "push cube"
    names = [f["name"] for f in spec["state_fields"]]
    assert "agent.qpos" in names and "extra.tcp_pose" in names and spec["action"]["kind"] == "box"
    assert found["same_seed_same_state"] and found["same_seed_same_frame"] and found["other_seed_other_state"]
    assert found["image"] == [32, 32, 3] and found["image_std"] > 5  # rendered by lavapipe, not a blank
    assert found["steps_to_end"] == 12 and found["ended_by"] == "truncated"


@pytest.mark.slow
def test_put_on_plate_names_a_pair_each_episode_and_only_that_pair_succeeds(side_python):
    """PutOnPlateInScene25Primitives-v1 (PutOnPlateInScene25's style, from primitives): the env
    checker on its camera, 25 cube-plate pairs drawn by the seed, success only for the named pair."""
    kwargs = {
        "task": "PutOnPlateInScene25Primitives-v1",
        "obs_mode": "rgb",
        "image_size": 32,
        "max_episode_steps": 6,
    }
    found = run_suite_checks(side_python, "rlinf/ManiSkill-v0", kwargs, "base_camera", "--plate-place")
    assert found["spec"]["instruction"].startswith("put the ") and found["spec"]["max_episode_steps"] == 6
    assert "extra.cube_pos" in [f["name"] for f in found["spec"]["state_fields"]]
    assert found["same_seed_same_state"] and found["same_seed_same_frame"] and found["other_seed_other_state"]
    assert found["image"] == [32, 32, 3] and found["image_std"] > 5
    assert found["steps_to_end"] == 6 and found["ended_by"] == "truncated"
    plate = found["plate"]
    assert plate["named_on_named"] and not plate["named_on_other_plate"] and not plate["other_on_named_plate"]
    assert plate["instruction_names_the_pair"] and plate["same_seed_same_instruction"]
    pairs = set(plate["instructions_of_seeds"])
    assert len(pairs) >= 12 and all(p.startswith("put the ") and p.endswith(" plate") for p in pairs), pairs


def test_the_vector_contract_holds_with_workers_in_maniskills_venv(side_python):
    venv = sim_envs.make_vector(
        "rlinf/ManiSkill-v0", 2, backend="subprocess", num_workers=2, python=side_python,
        task="PickCube-v1", max_episode_steps=5,
    )  # fmt: skip
    try:
        assert venv.spec.state_fields[0].name == "obs" and venv.spec.action.dim == 8
        obs, _ = venv.reset(seed=1)
        again, _ = venv.reset(seed=1)
        np.testing.assert_array_equal(obs["state"], again["state"])
        result = venv.chunk_step(np.zeros((2, 7, 8), np.float32))
        assert result.truncated.any(axis=1).all() and [e.length for e in result.finished] == [5, 5]
        assert not result.valid[:, 5:].any()  # the chunk stops at the episode's end
    finally:
        venv.close()


@pytest.mark.slow
def test_ppo_in_maniskill_beats_the_untrained_policy_on_fixed_seeds(side_python, tmp_path):
    kwargs = {"task": "PushCube-v1", "max_episode_steps": 50}
    before, after = ppo_returns_before_and_after("ppo_maniskill", side_python, kwargs, 8000, tmp_path, 4242)
    assert after > before + 2.0, (before, after)


def test_the_batched_adapter_keeps_the_contract_on_sapiens_cpu_physics(side_python):
    script = os.path.join(os.path.dirname(__file__), "maniskill_gpu_checks.py")
    result = subprocess.run([side_python, script, "1", "physx_cpu"], capture_output=True, text=True, timeout=300,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(script))))  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["spec"] == {"name": "rlinf/ManiSkillGPU-v0", "state_dim": 35, "action_dim": 8,
                             "instruction": "push cube", "max_episode_steps": 5}  # fmt: skip
    assert found["state_shape"] == [1, 35] and found["state_dtype"] == "float32"
    assert found["same_seed_same_state"] and found["other_seed_other_state"]
    # 2 steps played, then a chunk of 6: the episode ends at its 5th step (the chunk's 3rd), its last
    # observation kept, the rest of the chunk masked while the env plays into its new episode.
    assert found["ends"] == [2] and found["valid_after_end"] == [False] and found["finished"] == [0]
    assert found["final_obs_given"] == [True] and found["final_differs_from_new_start"] == [True]
    assert found["elapsed_after"] == [3]
    assert found["nan_refused"] and found["group_seeds_refused"]


def test_the_batched_adapter_refuses_several_envs_on_the_cpu_physics():
    with pytest.raises(ValueError, match="one env per process"):
        sim_envs.make_vector("rlinf/ManiSkillGPU-v0", 4, sim_backend="physx_cpu")


def test_without_a_gpu_the_batched_adapter_names_the_gpu_and_sapiens_physx_library(side_python, tmp_path):
    code = "import sim_envs\ntry:\n    sim_envs.make_vector('rlinf/ManiSkillGPU-v0', 4)\nexcept ValueError as e:\n    print(e)"
    result = subprocess.run([side_python, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HOME": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""})  # fmt: skip
    assert "needs a CUDA GPU" in result.stdout and "PhysX GPU library" in result.stdout, result.stdout
    assert f"linux-so.zip into {tmp_path}/.sapien/physx/" in result.stdout, result.stdout


def test_maniskill_in_the_main_venv_names_its_own_venv():
    with pytest.raises(ValueError, match=r"scripts/sim_venv.sh maniskill.*env.python"):
        sim_envs.make("rlinf/ManiSkill-v0")


def test_without_a_vulkan_driver_the_error_names_the_driver_to_install(side_python):
    code = "import sim_envs\ntry:\n    sim_envs.make('rlinf/ManiSkill-v0')\nexcept ValueError as e:\n    print(e)"
    hidden = {"VK_ICD_FILENAMES": "/nonexistent.json", "VK_DRIVER_FILES": "/nonexistent.json"}
    result = subprocess.run([side_python, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, **hidden})  # fmt: skip
    assert "needs a Vulkan driver" in result.stdout and "mesa-vulkan-drivers" in result.stdout, result.stdout
