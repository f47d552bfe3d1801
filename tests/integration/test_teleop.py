"""Human interventions on the real agent (sim twin) over the real link: a replayed device trace is
"the human"; the trainer drives a constant policy and records the episode."""

from __future__ import annotations

import time

import numpy as np
import pytest

from protos import robot_link_pb2 as pb
from robot_agent.safety import SafetyConfig
from robot_agent.teleop import TeleopReading, make_teleop
from robot_agent.teleop.replay import write_trace
from tests.integration.link_harness import constant_policy, start_agent, start_server, tcp_of, wait_until
from trainer.server.episode_runner import run_episode
from trainer.server.recorder import to_frames

pytestmark = pytest.mark.slow
TWIN = {"task": "reach", "max_episode_steps": 45, "cameras": ["front"], "image_size": 64}
POLICY = [0.0, 0.4, 0.0, 0.0, 0.0, 0.0, 1.0]
HUMAN_MOTION = [0.6, 0.0, -0.2, 0.0, 0.0, 0.0]
TAKEOVER_TICKS = 8


def replay(tmp_path, idle: int, driving: int, on_end: str = "release"):
    readings = [TeleopReading() for _ in range(idle)]
    readings += [
        TeleopReading(motion=np.array(HUMAN_MOTION, np.float32), takeover=True) for _ in range(driving)
    ]
    write_trace(tmp_path / "trace.jsonl", readings)
    return make_teleop("replay", {"path": str(tmp_path / "trace.jsonl"), "on_end": on_end})


def run(server, robot_id: str):
    wait_until(lambda: robot_id in server.server.sessions, what="the robot")
    session = server.server.sessions[robot_id]
    return server.call(run_episode(session, constant_policy(POLICY)), timeout=60)


@pytest.mark.alone
def test_interventions_are_executed_flagged_at_the_boundaries_recorded_and_handed_back_smoothly(tmp_path):
    server = start_server()
    # The trace advances once per episode tick, and ticks the policy's first chunk misses (a loaded
    # machine) consume idle lines too: leave a second of them so the policy has driven before the take-over.
    device = replay(tmp_path, idle=20, driving=TAKEOVER_TICKS)
    agent = start_agent(server.server.port, tmp_path / "spool", robot_id="twin", driver=TWIN, teleop=device)
    try:
        end = run(server, "twin")
        assert end.kind == pb.EpisodeEvent.ENDED
        wait_until(lambda: len(server.server.sink.episodes) == 1, what="the stored episode")
    finally:
        agent.stop()
        server.stop()
    episode = server.server.sink.episodes[0]
    transitions = [o.transition for o in episode.observations[1 : end.num_steps + 1]]
    flags = [t.intervened for t in transitions]
    first = flags.index(True)
    # One block of exactly the trace's take-over ticks, with the policy driving before and after.
    assert first >= 1, (
        f"the human took over before the policy drove (missed ticks {agent.agent.control.stats.missed_ticks})"
    )
    assert flags == [False] * first + [True] * TAKEOVER_TICKS + [False] * (len(flags) - first - 8)
    assert len(flags) > first + TAKEOVER_TICKS
    human = np.array([*HUMAN_MOTION, 1.0], np.float32)  # the gripper stays open (+1)
    for t in transitions[first : first + TAKEOVER_TICKS]:
        np.testing.assert_allclose(t.human_action, human, atol=1e-6)
        assert np.all(np.abs(t.executed_action) <= np.abs(human) + 1e-6)  # within the same safety limits
        # What the policy said for the tick, recorded however late its answer came.
        np.testing.assert_allclose(t.policy_action, POLICY, atol=1e-6)
    for t in transitions[:first] + transitions[first + TAKEOVER_TICKS :]:
        np.testing.assert_allclose(t.policy_action, POLICY, atol=1e-6)
        assert not t.human_action
    # The human moved +x, the policy +y: the recorded motion follows whoever drove.
    tcp = np.array([o.state[14:17] for o in episode.observations[: end.num_steps + 1]])
    steps = np.diff(tcp, axis=0)
    assert steps[first : first + TAKEOVER_TICKS, 0].sum() > 0.02 and abs(steps[:first, 0].sum()) < 0.01
    # Hand-over and hand-back never jump: every tick's motion stays within the per-step limit.
    assert np.linalg.norm(steps, axis=1).max() <= SafetyConfig().max_translation_m + 0.005
    frames = to_frames(episode)
    assert frames.scalars["intervention"].tolist() == flags
    np.testing.assert_allclose(frames.vectors["complementary_info.human_action"][first], human, atol=1e-6)
    assert not frames.vectors["complementary_info.human_action"][0].any()


def test_a_device_that_disappears_while_driving_holds_the_robot(tmp_path):
    server = start_server()
    device = replay(tmp_path, idle=4, driving=5, on_end="disconnect")
    agent = start_agent(server.server.port, tmp_path / "spool", robot_id="twin", driver=TWIN, teleop=device)
    try:
        end = run(server, "twin")
        assert end.kind == pb.EpisodeEvent.ABORTED and "teleop device lost" in end.reason
        assert agent.agent.control.holding
        at_loss = tcp_of(agent)
        settled = wait_until_still(agent)  # the arm brakes to the held pose
        time.sleep(0.5)  # ten more ticks at 20 Hz
        # The human's last command (0.6 of full scale in x) kept running would move ~1.8 cm per tick.
        assert np.linalg.norm(settled - at_loss) < 0.03
        assert np.linalg.norm(tcp_of(agent) - settled) < 2e-3
        assert agent.agent.control.stats.intervened_ticks == 5
    finally:
        agent.stop()
        server.stop()


def wait_until_still(agent, timeout: float = 10.0) -> np.ndarray:
    """The TCP once it has moved less than 0.2 mm in 0.2 s (a loaded machine runs the twin slower)."""
    last = tcp_of(agent)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = tcp_of(agent)
        if np.linalg.norm(now - last) < 2e-4:
            return now
        last = now
    raise AssertionError(f"the arm was still moving {timeout} s after the device was lost")
