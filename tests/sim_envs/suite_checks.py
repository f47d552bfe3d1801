"""Run by the suite tests (test_metaworld.py, test_maniskill.py, test_libero.py) in the suite's own venv: gymnasium's
env checker and the reset/step/truncation rules of one ``rlinf/...`` suite env, one JSON line of
findings on stdout for the test to assert on.

    python suite_checks.py ENV_ID KWARGS_JSON CAMERA [--reach | --libero-place | --plate-place]

``--reach``: also drive MetaWorld's reach hand to its goal with a proportional controller, so the
test sees ``info["success"]`` come through. ``--libero-place``: put a LIBERO pick-and-place task's
object (its first object of interest) just above its target (the second) and let it drop, so the
test sees the task's BDDL goal reported as success. ``--plate-place``: on ManiSkill's
``PutOnPlateInScene25Primitives-v1``, drop the named cube on the named plate, on the other plate, and
the other cube on the named plate; and read each seed's instruction.
"""

from __future__ import annotations

import json
import sys

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env

import sim_envs


def libero_place(env) -> tuple[bool, bool]:
    """(success once the object is dropped on its target, success before): the object's free joint
    is moved above the target, then the arm holds still."""
    env.reset(seed=1)
    _, _, _, _, info = env.step(np.zeros(7, np.float32))
    before = info["success"]
    scene = env.env
    thing, target = scene.obj_of_interest[:2]
    joint = scene.objects_dict[thing].joints[0]
    pose = scene.sim.data.get_joint_qpos(joint).copy()
    pose[:3] = scene.sim.data.body_xpos[scene.obj_body_id[target]] + np.array([0.0, 0.0, 0.05])
    scene.sim.data.set_joint_qpos(joint, pose)
    scene.sim.forward()
    for _ in range(20):
        _, _, terminated, _, info = env.step(np.zeros(7, np.float32))
        if info["success"]:
            return terminated, before  # LIBERO's episodes end on success
    return False, before


def plate_place(env) -> dict:
    """Success after dropping (named cube, named plate), (named cube, other plate) and (other cube,
    named plate), each from the same seeded start; and what the instructions and state say."""
    from mani_skill.utils.structs.pose import Pose

    from sim_envs.adapters.maniskill_put_on_plate import CUBE_HALF, CUBES, PLATE_HALF_THICKNESS, PLATES

    scene = env.env.unwrapped
    outcome = {}
    for case in ("named_on_named", "named_on_other_plate", "other_on_named_plate"):
        obs, _ = env.reset(seed=11)
        cube = scene.cube_index[0] if case != "other_on_named_plate" else scene.other_cube_index[0]
        plate = scene.plate_index[0] if case != "named_on_other_plate" else scene.other_plate_index[0]
        above = scene.plates[int(plate)].pose.p.clone()
        above[:, 2] += PLATE_HALF_THICKNESS + CUBE_HALF + 0.01
        scene.cubes[int(cube)].set_pose(Pose.create_from_pq(above, scene.cubes[int(cube)].pose.q))
        success = False
        for _ in range(10):
            info = env.step(np.zeros(env.action_space.shape, np.float32))[-1]
            success |= info["success"]
        outcome[case] = bool(success)
    obs, _ = env.reset(seed=11)
    cube, plate = list(CUBES)[int(scene.cube_index[0])], list(PLATES)[int(scene.plate_index[0])]
    outcome["instruction"] = obs["instruction"]
    outcome["instruction_names_the_pair"] = obs["instruction"] == f"put the {cube} on the {plate}"
    outcome["instructions_of_seeds"] = [env.reset(seed=s)[0]["instruction"] for s in range(30)]
    outcome["same_seed_same_instruction"] = (
        env.reset(seed=5)[0]["instruction"] == outcome["instructions_of_seeds"][5]
    )
    return outcome


def main() -> None:
    env_id, kwargs, camera = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    registered = gym.make(env_id, **{k: v for k, v in kwargs.items() if k != "max_episode_steps"})
    registered.close()  # the gymnasium id works too
    env = sim_envs.make(env_id, **kwargs)
    check_env(env, skip_render_check=True)
    first, _ = env.reset(seed=7)
    again, _ = env.reset(seed=7)
    other, _ = env.reset(seed=8)
    found = {
        "spec": env.env_spec.to_dict(),
        "same_seed_same_state": bool(np.array_equal(first["state"], again["state"])),
        "same_seed_same_frame": bool(np.array_equal(first["images"][camera], again["images"][camera])),
        "other_seed_other_state": bool(not np.allclose(first["state"], other["state"])),
        "image": list(first["images"][camera].shape),
        "image_std": float(first["images"][camera].std()),
    }
    env.reset(seed=7)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(np.zeros(env.action_space.shape, np.float32))
        steps += 1
        done = terminated or truncated
    found["steps_to_end"], found["ended_by"] = steps, "terminated" if terminated else "truncated"
    if "--reach" in sys.argv:  # MetaWorld reach: state[:3] is the hand, state[-3:] the goal
        obs, _ = env.reset(seed=7)
        success = False
        for _ in range(env.max_episode_steps):
            state = obs["state"]
            obs, _, _, _, info = env.step(np.append(np.clip(20 * (state[-3:] - state[:3]), -1, 1), 0.0))
            success |= info["success"]
        found["controller_success"] = bool(success)
    if "--plate-place" in sys.argv:
        found["plate"] = plate_place(env)
    if "--libero-place" in sys.argv:
        found["placed_success"], found["success_before_placing"] = libero_place(env)
    print(json.dumps(found))
    env.close()


if __name__ == "__main__":
    main()
