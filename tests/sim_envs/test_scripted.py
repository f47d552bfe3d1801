import numpy as np

import sim_envs
from sim_envs.scripted import ScriptedPickLift


def run_scripted(env, seeds):
    policy = ScriptedPickLift(env.env_spec)
    lifts = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        policy.reset()
        best_lift = 0.0
        for _ in range(env.max_episode_steps):
            obs, _, _terminated, _truncated, info = env.step(policy.act(obs))
            best_lift = max(best_lift, env.task.lift(env.scene))
            if info["success"]:
                break
        lifts.append(best_lift)
    return np.array(lifts)


def test_scripted_controller_solves_pick_lift_in_95_percent_of_100_seeds():
    env = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=())
    lifts = run_scripted(env, range(100))
    success_rate = (lifts >= 0.05).mean()
    assert success_rate >= 0.95, f"scripted success {success_rate:.2f}"


def test_pick_lift_is_not_solved_by_doing_nothing_or_opening_the_gripper():
    env = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=())
    env.reset(seed=0)
    for _ in range(env.max_episode_steps):
        _, reward, _, _, info = env.step(np.array([0, 0, 0, 0, 0, 0, 1], np.float32))
        assert not info["success"]
    assert reward < 0.5
