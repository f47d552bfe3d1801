"""The trainer's view of one robot (``RobotSession``), driven message by message on an event loop."""

from __future__ import annotations

import asyncio

import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import EnvSpec, StateField, ee_delta_action_space
from trainer.server.session import RobotSession

HOLD = np.array([[0, 0, 0, 0, 0, 0, 1]], np.float32)


def observation(seq: int, step: int, transition: pb.Transition | None = None) -> pb.Observation:
    obs = pb.Observation(seq=seq, episode_id="ep", step=step)
    if transition is not None:
        obs.transition.CopyFrom(transition)
    return obs


def session() -> RobotSession:
    spec = EnvSpec("arm", (), (StateField("tcp_pos", 3),), ee_delta_action_space(), 20.0, "", 50)
    return RobotSession(pb.Register(robot_id="r", spec=link_codec.spec_to_proto(spec)), spec)


def test_a_human_driven_tick_records_the_policy_answer_that_reached_the_agent_too_late():
    robot = session()
    human_drove = pb.Transition(executed_action=[0.5] * 7, human_action=[0.5] * 7, intervened=True)

    async def scenario():
        await robot.on_observation(observation(seq=5, step=0))
        robot.send_actions(HOLD, obs_seq=5)  # the answer the agent did not wait for
        await robot.on_observation(observation(seq=6, step=1, transition=human_drove))
        robot.send_actions(HOLD, obs_seq=6)
        # A tick whose observation the trainer never saw (skipped on a slow link): nothing is guessed.
        await robot.on_observation(observation(seq=9, step=3, transition=human_drove))

    asyncio.run(scenario())
    filled, unseen = robot.recent[1].transition, robot.recent[2].transition
    np.testing.assert_array_equal(filled.policy_action, HOLD[0])
    assert list(filled.human_action) == [0.5] * 7  # the rest of what the agent reported is kept
    assert len(unseen.policy_action) == 0


def test_a_policy_answer_that_the_agent_recorded_is_not_overwritten():
    robot = session()
    own = pb.Transition(executed_action=[0.5] * 7, policy_action=[0.1] * 7, intervened=True)

    async def scenario():
        await robot.on_observation(observation(seq=1, step=0))
        robot.send_actions(HOLD, obs_seq=1)
        await robot.on_observation(observation(seq=2, step=1, transition=own))

    asyncio.run(scenario())
    np.testing.assert_allclose(robot.recent[1].transition.policy_action, [0.1] * 7)


def test_frame_age_and_safety_events_from_the_agent_reach_the_session_and_the_table():
    from trainer.server.console import safety_summary

    robot = session()
    clipped = pb.Transition(safety_events=["clipped:workspace", "clipped:speed"])

    async def scenario():
        for seq in range(3):
            obs = observation(seq, seq, clipped if seq else None)
            obs.mono_ns = 1_000_000_000 + seq * 50_000_000
            obs.frames.add(camera="front", capture_mono_ns=obs.mono_ns - 12_000_000)  # 12 ms old
            await robot.on_observation(obs)

    asyncio.run(scenario())
    assert list(robot.stats.frame_age_ms) == [12.0, 12.0, 12.0]
    assert robot.stats.safety_events == {"clipped:workspace": 2, "clipped:speed": 2}
    assert safety_summary(robot.stats.safety_events) == "clipped:workspace 2, clipped:speed 2"


def test_a_checkpoint_path_gives_the_policy_version_its_chunks_carry():
    from trainer.server.policy_driver import checkpoint_version

    assert checkpoint_version("runs/ppo/checkpoints/step_204800/policy") == 204800
    assert checkpoint_version("bc/round_003/policy") == 0


def test_a_robot_clock_far_from_the_trainers_is_reported(caplog):
    import time

    robot, synced = session(), session()

    async def scenario():
        await robot.on_observation(pb.Observation(seq=1, wall_ns=int((time.time() - 5.0) * 1e9)))
        await synced.on_observation(pb.Observation(seq=1, wall_ns=time.time_ns()))

    with caplog.at_level("WARNING", logger="trainer.server.session"):
        asyncio.run(scenario())
    assert 4.5 < robot.stats.clock_offset_s < 6.0 and abs(synced.stats.clock_offset_s) < 0.5
    assert [r.getMessage() for r in caplog.records] == [
        "robot r: its clock is 5.0 s behind the trainer's; sync it (NTP/chrony) so logs line up"
    ]
