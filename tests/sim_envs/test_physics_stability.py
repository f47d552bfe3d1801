"""The sim's physics stays finite where a light cube is pinched between a finger and the table."""

import numpy as np
import pytest

import sim_envs
from sim_envs.randomization import REALITY_GAP
from sim_envs.scene import TABLE_TOP_Z
from sim_envs.scripted import scripted_policy

# Under the "implicitfast" integrator these scripted pick-lifts blew up (NaN / tunnelling cube)
# at steps 19, 30, 31, 17 and 20; the full implicit integrator keeps them finite.
PINCHED_SEEDS = (1, 4, 23, 43, 58)


@pytest.mark.parametrize("seed", PINCHED_SEEDS)
def test_scripted_pick_lift_under_the_reality_gap_never_blows_up(seed):
    env = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=(), randomization=REALITY_GAP)
    obs, _ = env.reset(seed=seed)
    expert = scripted_policy(env.env_spec)
    cube_z = env.model.joint("cube_joint").qposadr[0] + 2
    for _ in range(env.max_episode_steps):
        obs, _, _, truncated, info = env.step(expert.act(obs))
        assert "physics_unstable" not in info
        assert np.isfinite(env.data.qvel).all() and env.data.qpos[cube_z] > TABLE_TOP_Z - 0.005
        if truncated:
            break
