from dataclasses import dataclass, field

import numpy as np

import sim_envs
from sim_envs.scripted import ScriptedPickLift
from sim_envs.tasks import PushTask


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


def scripted_success_rate(env_id: str, seeds) -> float:
    from sim_envs.scripted import scripted_policy

    env = sim_envs.make(env_id, cameras=(), action_rotation=False)
    policy = scripted_policy(env.env_spec)
    successes = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        policy.reset()
        success = False
        for _ in range(env.max_episode_steps):
            obs, _, _, _, info = env.step(policy.act(obs))
            success |= info["success"]
            if success:
                break
        successes.append(success)
    return float(np.mean(successes))


def test_scripted_push_and_reach_solve_their_tasks():
    assert scripted_success_rate("rlinf/FrankaPush-v0", range(40)) >= 0.9
    assert scripted_success_rate("rlinf/FrankaReach-v0", range(20)) >= 0.95


@dataclass
class FakeScene:
    tcp_pos: np.ndarray
    cube_pos: np.ndarray
    goal_pos: np.ndarray
    cube_half_size: float = 0.02
    cube_quat: np.ndarray = field(default_factory=lambda: np.array([1.0, 0, 0, 0]))


def test_push_reward_rises_in_stages():
    task = PushTask()
    cube, goal = np.array([0.5, 0.0, 0.02]), np.array([0.62, 0.0, 0.02])
    far = FakeScene(np.array([0.3, 0.3, 0.4]), cube, goal)
    pose = task.push_pose(far)
    np.testing.assert_allclose(pose, [0.45, 0.0, 0.025])  # 5 cm behind the cube, away from the goal
    behind = FakeScene(pose, cube, goal)
    along = np.array([1.0, 0.0, 0.0])
    halfway = FakeScene(pose + 0.06 * along, cube + 0.06 * along, goal)
    done = FakeScene(goal - 0.05 * along, goal - 0.01 * along, goal)
    rewards = [task.evaluate(s).dense_reward for s in (far, behind, halfway)]
    assert rewards[0] < 0.3 < rewards[1] < rewards[2] < 1.0
    assert task.evaluate(done).success and task.evaluate(done).dense_reward == 1.0


def test_dart_noise_moves_the_arm_but_the_labels_stay_the_experts():
    from sim_envs.scripted import play_expert, scripted_policy

    env = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=(), action_rotation=False)
    clean = play_expert(env, seed=5)
    noisy = play_expert(env, seed=5, action_noise=0.3)
    np.testing.assert_array_equal(clean.states[0], noisy.states[0])  # the same start
    assert np.abs(clean.states[1:10] - noisy.states[1:10]).max() > 1e-3  # the noise was carried out
    # Every recorded label is what the expert says on the states the noisy run visited.
    expert = scripted_policy(env.privileged_spec())
    labels = np.stack([expert.act({"state": s}) for s in noisy.states])
    np.testing.assert_allclose(labels, noisy.actions, atol=1e-6)
    assert not np.allclose(labels[:10], clean.actions[:10])
