"""Run by tests/sim_envs/test_metaworld.py in MetaWorld's own venv (``scripts/sim_venv.sh metaworld``):
gymnasium's env checker and the reset/step/truncation rules of ``rlinf/MetaWorld-v0``, one JSON line
of findings on stdout for the test to assert on."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env

import sim_envs


def main() -> None:
    registered = gym.make("rlinf/MetaWorld-v0", task="reach-v3")  # the gymnasium id works too
    registered.close()
    env = sim_envs.make("rlinf/MetaWorld-v0", task="reach-v3", cameras=("corner",), image_size=48,
                        max_episode_steps=80)  # fmt: skip
    check_env(env, skip_render_check=True)
    first, info = env.reset(seed=7)
    again, _ = env.reset(seed=7)
    other, other_info = env.reset(seed=8)
    steps, truncated = 0, False
    env.reset(seed=7)
    while not truncated:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        assert not terminated
    # Drive the hand to the goal with a proportional controller: info["success"] must come.
    obs, _ = env.reset(seed=7)
    success = False
    for _ in range(80):
        state = obs["state"]
        action = np.append(np.clip(20 * (state[-3:] - state[:3]), -1, 1), 0.0)
        obs, _, _, _, step_info = env.step(action)
        success |= step_info["success"]
    print(json.dumps({
        "spec": env.env_spec.to_dict(),
        "same_seed_same_state": bool(np.array_equal(first["state"], again["state"])),
        "same_seed_same_frame": bool(np.array_equal(first["images"]["corner"], again["images"]["corner"])),
        "other_seed_other_goal": bool(not np.allclose(first["state"][-3:], other["state"][-3:])),
        "variations": [info["variation"], other_info["variation"]],
        "image": list(first["images"]["corner"].shape),
        "image_std": float(first["images"]["corner"].std()),
        "steps_to_truncation": steps,
        "controller_success": bool(success),
    }))  # fmt: skip
    env.close()


if __name__ == "__main__":
    main()
