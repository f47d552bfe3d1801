"""rlinf/FrankaPickColor-v0: the instruction names one of three cubes, and only that cube counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sim_envs
from sim_envs.scripted import ScriptedPickLift
from trainer.expert_demos import DemoConfig, record_expert_demos


def lift_with_expert_but_aim_at(env, color: str | None, seed: int) -> bool:
    """Play the scripted expert, optionally pointed at another cube than the named one."""
    env.reset(seed=seed)
    expert = ScriptedPickLift(env.privileged_spec())
    slices = env.privileged_spec().state_slices()
    success = False
    for _ in range(env.max_episode_steps):
        state = env.privileged_state().copy()
        if color is not None:
            pos, quat = env.scene.cube_pose_of(color)
            state[slices["cube_pos"]], state[slices["cube_quat"]] = pos, quat
        _, _, _, _, info = env.step(expert.act({"state": state}))
        success |= info["success"]
    return success


def test_each_episode_names_a_cube_and_only_lifting_that_one_succeeds():
    env = sim_envs.make("rlinf/FrankaPickColor-v0", cameras=(), action_rotation=False)
    named, solved, wrong_cube_succeeded = [], 0, 0
    for seed in range(12):
        obs, _ = env.reset(seed=seed)
        named.append(obs["instruction"])
        assert obs["instruction"] == f"lift the {env.task.target} cube"
        solved += lift_with_expert_but_aim_at(env, None, seed)
        other = next(c for c in env.task.colors if c != env.task.target)
        wrong_cube_succeeded += lift_with_expert_but_aim_at(env, other, seed)
    assert len(set(named)) == 3  # all three colours get named
    assert solved >= 11 and wrong_cube_succeeded == 0, (solved, wrong_cube_succeeded)


def test_the_cubes_start_apart_and_the_state_fields_describe_them():
    env = sim_envs.make("rlinf/FrankaPickColor-v0", cameras=())
    for seed in range(20):
        env.reset(seed=seed)
        positions = [env.scene.cube_pose_of(c)[0][:2] for c in env.task.colors]
        gaps = [np.linalg.norm(a - b) for i, a in enumerate(positions) for b in positions[i + 1 :]]
        assert min(gaps) >= 0.08
        state, slices = env.privileged_state(), env.privileged_spec().state_slices()
        onehot = state[slices["target_color"]]
        assert onehot.sum() == 1 and env.task.colors[int(onehot.argmax())] == env.task.target
        np.testing.assert_allclose(
            state[slices["cube_pos"]], env.scene.cube_pose_of(env.task.target)[0], atol=1e-6
        )


def test_recorded_demos_keep_each_episodes_instruction(tmp_path):
    kwargs = {"cameras": [], "action_rotation": False, "privileged_state": False}
    summary = record_expert_demos(
        DemoConfig("rlinf/FrankaPickColor-v0", 6, str(tmp_path / "ds"), seed=0, env_kwargs=kwargs), False
    )
    assert summary.written == 6 and summary.frames == 6 * 80
    tasks = pd.read_parquet(tmp_path / "ds" / "meta" / "tasks.parquet")
    episodes = pd.read_parquet(next((tmp_path / "ds" / "meta" / "episodes").rglob("*.parquet")))
    assert len(tasks) >= 2 and all(t.startswith("lift the ") for t in tasks.index)
    assert all(len(t) == 1 and t[0] in tasks.index for t in episodes["tasks"])


def test_object_state_shows_every_cube_but_not_which_one_is_named():
    env = sim_envs.make("rlinf/FrankaPickColor-v0", cameras=(), privileged_state=False, object_state=True)
    names = [f.name for f in env.env_spec.state_fields]
    assert names[-3:] == ["red_cube", "green_cube", "blue_cube"] and "target_color" not in names
    seen = set()
    for seed in range(12):
        obs, _ = env.reset(seed=seed)
        privileged = env.privileged_state()
        full = env.privileged_spec().state_slices()
        shown = env.env_spec.state_slices()
        cubes = privileged[full["cubes_pos"]].reshape(3, 3)
        tcp = privileged[full["tcp_pos"]]
        for i, color in enumerate(("red", "green", "blue")):
            np.testing.assert_allclose(
                obs["state"][shown[f"{color}_cube"]], [*cubes[i], *(cubes[i] - tcp)], atol=1e-6
            )
        seen.add(obs["instruction"])
    assert len(seen) == 3  # the instruction alone says which cube: it varies over the same layout of fields


def test_object_state_conflicts_and_no_objects_are_one_line_errors():
    with pytest.raises(ValueError, match="object_state=true needs privileged_state=false"):
        sim_envs.make("rlinf/FrankaPickColor-v0", cameras=(), object_state=True)
    with pytest.raises(ValueError, match="task 'reach' has no objects to show"):
        sim_envs.make("rlinf/FrankaReach-v0", cameras=(), privileged_state=False, object_state=True)
