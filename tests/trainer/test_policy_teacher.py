"""A saved state policy as the demonstrator of an image policy (``rlinf-trainer demos --teacher``)."""

from __future__ import annotations

import numpy as np
import pytest

import sim_envs
from policies import PolicyConfig, make_policy
from protos.env_spec import with_previous_action
from sim_envs.scripted import play_expert
from trainer.cli import main as trainer_main
from trainer.expert_demos import DemoConfig, record_expert_demos
from trainer.policy_teacher import PolicyTeacher, TeacherError

# What the student sees: a camera and proprioception with the previous action, no cube or goal.
STUDENT = {"cameras": ["front"], "image_height": 32, "image_width": 32, "privileged_state": False,
           "action_rotation": False, "previous_action_in_state": True, "max_episode_steps": 6}  # fmt: skip


def saved_state_policy(tmp_path, spec, name="teacher"):
    """A tiny random state policy, saved with the real saver."""
    policy = make_policy(spec, PolicyConfig(hidden_sizes=[16], value_head=False))
    policy.save(tmp_path / name)
    return tmp_path / name


@pytest.fixture
def student_env():
    env = sim_envs.make("rlinf/FrankaReach-v0", **STUDENT)
    yield env
    env.close()


def test_the_episode_records_the_students_view_and_the_teachers_greedy_actions(tmp_path, student_env):
    env = student_env
    teacher = PolicyTeacher(saved_state_policy(tmp_path, with_previous_action(env.privileged_spec())), env)
    episode = play_expert(env, seed=3, teacher=teacher)
    # the student's view: proprioception and previous action, and the camera's frames
    assert episode.states.shape == (6, env.env_spec.state_dim)
    assert env.env_spec.state_dim < teacher.policy.spec.state_dim  # the goal is not in it
    assert len(episode.images["front"]) == 6 and episode.images["front"][0].shape == (32, 32, 3)
    # the labels are the teacher's own greedy actions, step by step from the same reset
    env.reset(seed=3)
    scripted = sim_envs.scripted.expert_for(env)
    assert not np.allclose(scripted.act({"state": env.privileged_state(perceived=False)}), episode.actions[0])
    for action in episode.actions:
        np.testing.assert_allclose(teacher(env), action, atol=1e-6)
        env.step(action)


def test_the_teacher_reads_the_privileged_state_and_the_action_last_applied(tmp_path, student_env):
    env = student_env
    teacher = PolicyTeacher(saved_state_policy(tmp_path, with_previous_action(env.privileged_spec())), env)
    env.reset(seed=0)
    action = np.array([0.5, -0.25, 0.75, -1.0], np.float32)
    env.step(action)
    state = teacher.state(env)
    np.testing.assert_allclose(state[-4:], action)
    np.testing.assert_allclose(state[:-4], env.privileged_state())
    # a teacher trained without the previous action reads the privileged state alone
    plain = PolicyTeacher(saved_state_policy(tmp_path, env.privileged_spec(), "plain"), env)
    np.testing.assert_allclose(plain.state(env), env.privileged_state())


def test_a_teacher_that_does_not_fit_the_env_is_one_line(tmp_path, student_env):
    env = student_env
    other = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=[], action_rotation=False)
    pick_lift_teacher = saved_state_policy(tmp_path, other.privileged_spec(), "pick_lift")
    other.close()
    with pytest.raises(TeacherError, match=r"trained on 32 state dims.*privileged state gives 28"):
        PolicyTeacher(pick_lift_teacher, env)
    with pytest.raises(TeacherError, match="not a saved policy folder"):
        PolicyTeacher(tmp_path / "nowhere", env)


def test_a_teacher_that_never_succeeds_is_named_in_the_recorders_error(tmp_path):
    env = sim_envs.make("rlinf/FrankaReach-v0", **STUDENT)
    teacher = saved_state_policy(tmp_path, with_previous_action(env.privileged_spec()))
    env.close()
    config = DemoConfig(
        "rlinf/FrankaReach-v0", 1, str(tmp_path / "demos"), env_kwargs=STUDENT, teacher=str(teacher)
    )
    with pytest.raises(RuntimeError, match="the teacher succeeded in only 0 of 13 episodes"):
        record_expert_demos(config, progress=False)


def test_demos_cli_with_a_missing_teacher_is_one_line(tmp_path, capsys):
    code = trainer_main(["demos", "--env", "rlinf/FrankaReach-v0", "--episodes", "1", "--out", str(tmp_path / "d"),
                         "--teacher", str(tmp_path / "nowhere"), "--env-kwargs", "{cameras: [], privileged_state: false}"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: teacher") and "no policy.json" in err and "\n" not in err
