"""The previous action in the state: a sim and a robot agent append it the same way, so a policy that
reads it trains in the sim and runs on the robot (``previous_action_in_state``)."""

from __future__ import annotations

import numpy as np
import pytest

from protos.env_spec import PREVIOUS_ACTION, spec_mismatch
from sim_envs.franka_env import FrankaEnv
from tests.integration.link_harness import TWIN, answer_episode, start_agent, start_server


def twin_like_sim(previous_action_in_state: bool) -> FrankaEnv:
    """The sim task the harness's twin runs, as a trainer's sim env would be configured."""
    return FrankaEnv(
        task=TWIN["task"], control_hz=TWIN["control_hz"], cameras=TWIN["cameras"],
        image_height=TWIN["image_size"], image_width=TWIN["image_size"], privileged_state=False,
        previous_action_in_state=previous_action_in_state,
    )  # fmt: skip


def test_the_sim_state_ends_with_the_action_last_applied():
    env = twin_like_sim(True)
    try:
        dim = env.env_spec.action.dim
        assert env.env_spec.state_fields[-1].name == PREVIOUS_ACTION
        assert env.env_spec.state_fields[-1].size == dim
        plain = twin_like_sim(False)
        assert env.env_spec.state_dim == plain.env_spec.state_dim + dim
        plain.close()
        obs, _ = env.reset(seed=0)
        assert np.array_equal(obs["state"][-dim:], np.zeros(dim))
        rng = np.random.default_rng(0)
        for _ in range(3):
            action = rng.uniform(-1, 1, dim).astype(np.float32)
            obs, *_ = env.step(action)
            assert np.allclose(obs["state"][-dim:], action)
        obs, _ = env.reset(seed=1)  # a new episode starts from no action again
        assert np.array_equal(obs["state"][-dim:], np.zeros(dim))
    finally:
        env.close()


def test_the_agent_sends_the_action_it_chose_before_the_filter_as_the_sim_does(tmp_path):
    server = start_server()
    agent = start_agent(server.server.port, tmp_path, previous_action_in_state=True)
    # Every other action asks for a step longer than the safety filter allows (|translation| > 1),
    # so the robot executes a shortened one; the state must still carry the one chosen, as the sim's
    # does (a policy trained there reads its own last output, not the filter's).
    small = np.array([0.1, -0.05, 0.1, 0, 0, 0, 1.0], np.float32)
    large = np.array([0.9, -0.9, 0.9, 0, 0, 0, 1.0], np.float32)
    sent = [large if k % 2 else small for k in range(12)]
    try:
        session = server.call(server.server.wait_for_robot(timeout=30))
        observations = server.call(answer_episode(session, 12, lambda step, obs: [sent[step]]), timeout=60)
        robot_spec = session.spec
    finally:
        agent.stop()
        server.stop()
    dim = len(sent[0])
    sim = twin_like_sim(True)
    plain = twin_like_sim(False)
    try:
        assert spec_mismatch(sim.env_spec, robot_spec) is None  # co-training takes both
        assert spec_mismatch(plain.env_spec, robot_spec) is not None  # ... and refuses a mix
    finally:
        sim.close()
        plain.close()
    states = [np.asarray(o.state, np.float32) for o in observations]
    assert np.array_equal(states[0][-dim:], np.zeros(dim))  # before the episode's first action
    executed = [o for o in observations[1:] if len(o.transition.executed_action)]
    assert len(executed) >= 8
    chosen = {tuple(np.round(a, 4)) for a in (small, large)}
    for obs in executed:  # each state carries an action as it was chosen, never a filtered one
        assert tuple(np.round(np.asarray(obs.state)[-dim:], 4)) in chosen
    filtered = [
        o for o in executed if not np.allclose(np.asarray(o.state)[-dim:], o.transition.executed_action)
    ]
    assert len(filtered) >= 3  # ... also where the robot executed a shortened step


@pytest.mark.parametrize("where", ["sim", "agent"])
def test_without_the_option_the_state_is_unchanged(tmp_path, where):
    if where == "sim":
        env = twin_like_sim(False)
        assert PREVIOUS_ACTION not in env.env_spec.state_slices()
        env.close()
        return
    server = start_server()
    agent = start_agent(server.server.port, tmp_path)
    try:
        session = server.call(server.server.wait_for_robot(timeout=30))
        assert PREVIOUS_ACTION not in session.spec.state_slices()
    finally:
        agent.stop()
        server.stop()
