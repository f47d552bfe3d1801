"""The robot link end to end: real grpc on loopback, a real trainer link server, agents on the MuJoCo twin."""

from __future__ import annotations

import asyncio
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.franka import PANDA
from robot_agent.link import LinkRefused
from robot_agent.safety import SafetyConfig
from tests.integration.certs import make_pki
from tests.integration.link_harness import constant_policy, start_agent, start_server, tcp_of, wait_until
from trainer.server.auth import ServerAuthConfig
from trainer.server.episode_runner import run_episode

pytestmark = pytest.mark.slow

UP = [0, 0, 1.0, 0, 0, 0, 1.0]  # +z at full speed, gripper open


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_auth(pki, token="s3cret", client_ca=False) -> ServerAuthConfig:
    return ServerAuthConfig(
        token=token,
        tls_cert=str(pki.server_cert),
        tls_key=str(pki.server_key),
        client_ca=str(pki.ca) if client_ca else None,
    )


def test_register_and_stream_at_20hz_with_two_cameras_over_tls(tmp_path, pki):
    server = start_server(tls_auth(pki))
    agent = start_agent(server.server.port, tmp_path, tls_ca=str(pki.ca), token="s3cret")
    try:
        session = server.call(server.server.wait_for_robot("twin-0", timeout=30))
        assert session.spec == agent.agent.driver.spec  # the spec travelled in the registration
        assert session.spec.camera_names == ("front", "wrist")
        policy = constant_policy([0.2, 0, 0, 0, 0, 0, 1])
        end = server.call(run_episode(session, policy, policy_version=7), timeout=60)
        assert end.kind == pb.EpisodeEvent.ENDED and end.reason == "truncated"
        wait_until(lambda: len(server.server.sink.episodes) == 1, what="the episode to be stored")
        episode = server.server.sink.episodes[0]
        assert [o.step for o in episode.observations] == list(range(session.spec.max_episode_steps + 1))
        for obs in episode.observations[::10]:
            images = link_codec.decode_images(obs.frames, session.spec)
            assert {k: v.shape for k, v in images.items()} == {"front": (64, 64, 3), "wrist": (64, 64, 3)}
            assert len(obs.state) == session.spec.state_dim
        steps = episode.observations[1:]
        assert all(len(o.transition.executed_action) == 7 for o in steps)
        # Every step names the policy version whose chunk drove it, as the trainer stamped it.
        assert [o.transition.policy_version for o in steps] == [7] * len(steps)
        assert session.stats.policy_version == 7
        # The agent ran on its own 20 Hz clock.
        periods_ms = np.diff([o.mono_ns for o in episode.observations]) / 1e6
        assert 40 < np.median(periods_ms) < 60
        wait_until(
            lambda: agent.agent.spool.pending() == [], what="the acknowledged episode to leave the spool"
        )
        # The standard grpc health service answers on the same TLS port.
        with grpc.secure_channel(
            f"127.0.0.1:{server.server.port}", grpc.ssl_channel_credentials(pki.ca.read_bytes())
        ) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="rlinf.link.v1.RobotLink"), timeout=5
            )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        agent.stop()
        server.stop()
    assert agent.error is None


@pytest.mark.parametrize("token", ["wrong", None])
def test_wrong_or_missing_token_is_refused_with_a_clear_message(tmp_path, pki, token):
    server = start_server(tls_auth(pki))
    agent = start_agent(server.server.port, tmp_path, tls_ca=str(pki.ca), token=token)
    try:
        agent.join(20)
        assert not agent.is_alive(), "a refused agent must stop, not retry forever"
        assert isinstance(agent.error, LinkRefused)
        assert "token" in str(agent.error)
        assert server.server.refused >= 1
        assert server.server.sessions == {}
    finally:
        agent.stop()
        server.stop()


def test_mutual_tls_admits_only_agents_with_a_client_certificate_as_its_common_name(tmp_path, pki):
    server = start_server(tls_auth(pki, token=None, client_ca=True))
    cert = {"tls_ca": str(pki.ca), "tls_cert": str(pki.client_cert), "tls_key": str(pki.client_key)}
    without = start_agent(server.server.port, tmp_path / "a", robot_id="no-cert", tls_ca=str(pki.ca))
    with_cert = start_agent(server.server.port, tmp_path / "b", robot_id="robot-0", **cert)
    # The certificate is robot-0's: it cannot register another robot's id.
    impostor = start_agent(server.server.port, tmp_path / "c", robot_id="robot-1", **cert)
    try:
        server.call(server.server.wait_for_robot("robot-0", timeout=30))
        impostor.join(30)
        assert isinstance(impostor.error, LinkRefused) and "common name" in str(impostor.error)
        time.sleep(1.0)
        assert "no-cert" not in server.server.sessions and "robot-1" not in server.server.sessions
        assert without.agent.link.sessions == 0
    finally:
        for agent in (without, with_cert, impostor):
            agent.stop()
        server.stop()


def test_an_expired_certificate_or_a_wrong_ca_stops_the_agent_with_one_line(tmp_path, pki):
    server = start_server(tls_auth(pki, token=None, client_ca=True))
    expired = start_agent(server.server.port, tmp_path / "a", robot_id="robot-0", tls_ca=str(pki.ca),
                          tls_cert=str(pki.expired_cert), tls_key=str(pki.expired_key))  # fmt: skip
    # The client certificate as the CA: it did not sign the trainer's certificate.
    wrong_ca = start_agent(server.server.port, tmp_path / "b", robot_id="robot-0", tls_ca=str(pki.client_cert),
                           tls_cert=str(pki.client_cert), tls_key=str(pki.client_key))  # fmt: skip
    try:
        for agent in (expired, wrong_ca):
            agent.join(30)
            assert not agent.is_alive(), "the agent kept retrying"
            assert isinstance(agent.error, LinkRefused) and "TLS" in str(agent.error), agent.error
            assert "\n" not in str(agent.error)
        assert not server.server.sessions
    finally:
        expired.stop()
        wrong_ca.stop()
        server.stop()


def test_an_agent_without_tls_dialling_a_tls_trainer_stops_with_a_hint(tmp_path, pki):
    server = start_server(tls_auth(pki))
    plain = start_agent(server.server.port, tmp_path / "a", robot_id="robot-0", token="s3cret", insecure=True)
    try:
        plain.join(30)
        assert not plain.is_alive(), "the agent kept retrying 'Socket closed'"
        assert isinstance(plain.error, LinkRefused) and "speaks TLS" in str(plain.error), plain.error
        assert "drop --insecure" in str(plain.error) and "\n" not in str(plain.error)
    finally:
        plain.stop()
        server.stop()


def test_a_plaintext_trainer_down_is_not_mistaken_for_tls(tmp_path):
    """The probe behind that hint says "no TLS" for a plaintext trainer and for none at all."""
    from robot_agent.config import LinkConfig
    from robot_agent.tls_probe import speaks_tls
    from tests.integration.test_serve import free_port

    server = start_server()
    try:
        assert not speaks_tls(LinkConfig(server=f"127.0.0.1:{server.server.port}", insecure=True))
    finally:
        server.stop()
    assert not speaks_tls(LinkConfig(server=f"127.0.0.1:{free_port()}", insecure=True))


def test_killed_server_puts_the_robot_in_hold_and_the_spool_is_replayed(tmp_path):
    server = start_server()
    port = server.server.port
    agent = start_agent(port, tmp_path)
    control = agent.agent.control
    try:
        session = server.call(server.server.wait_for_robot(timeout=30))
        asyncio.run_coroutine_threadsafe(
            run_episode(session, constant_policy([0.3, 0, 0, 0, 0, 0, 1])), server.loop
        )
        wait_until(lambda: control.stats.actions_executed >= 15, what="the episode to get going")
        server.stop(grace=None)  # a crash, from the agent's side: every stream drops at once
        killed_at = time.monotonic()
        wait_until(lambda: control.holding, timeout=5, what="hold")
        hold_at, reason, deadline = control.stats.holds_entered[-1]
        assert reason in ("link down", "watchdog")
        assert hold_at <= deadline + 0.050, f"held {1000 * (hold_at - deadline):.0f} ms after the deadline"
        assert hold_at - killed_at < 0.5
        steps_done = control.stats.actions_executed
        # Held means held: the arm (moving at 0.3 m/s) stops near where it was and stays; no action runs.
        at_hold = tcp_of(agent)
        time.sleep(0.5)
        settled = tcp_of(agent)
        time.sleep(0.5)
        assert np.linalg.norm(settled - at_hold) < 0.02
        assert np.linalg.norm(tcp_of(agent) - settled) < 1e-3
        assert control.stats.actions_executed == steps_done
        # The episode was aborted and spooled; a restarted trainer on the same port gets it replayed.
        wait_until(lambda: len(agent.agent.spool.pending()) == 1, what="the aborted episode in the spool")
        episode_id = agent.agent.spool.pending()[0]
        server = start_server(port=port)
        wait_until(lambda: len(server.server.sink.episodes) == 1, what="the spooled episode to be replayed")
        stored = server.server.sink.episodes[0]
        assert stored.episode_id == episode_id and stored.aborted
        assert [o.step for o in stored.observations] == list(range(stored.end.num_steps + 1))
        assert stored.end.num_steps == steps_done
        wait_until(lambda: agent.agent.spool.pending() == [], what="the replayed episode to be acknowledged")
        assert agent.agent.link.sessions == 2
        # The robot serves the new trainer normally.
        session = server.call(server.server.wait_for_robot(timeout=30))
        end = server.call(run_episode(session, constant_policy([0, 0, 0, 0, 0, 0, 1])), timeout=60)
        assert end.kind == pb.EpisodeEvent.ENDED
        wait_until(lambda: len(server.server.sink.episodes) == 2, what="the second episode")
        assert len({e.episode_id for e in server.server.sink.episodes}) == 2
    finally:
        agent.stop()
        server.stop()


def test_watchdog_holds_when_a_connected_trainer_stops_answering(tmp_path):
    server = start_server()
    agent = start_agent(server.server.port, tmp_path)
    control = agent.agent.control
    try:
        session = server.call(server.server.wait_for_robot(timeout=30))
        answered = []

        async def answer_ten_steps_then_go_quiet():
            session.send_command(pb.Command.START_EPISODE, seed=0)
            last = -1
            while len(answered) < 10:
                obs = await session.next_observation(last, timeout=5)
                last = obs.seq
                if obs.episode_id:
                    session.send_actions(np.asarray([UP], np.float32), obs.seq)
                    answered.append(obs.seq)

        server.call(answer_ten_steps_then_go_quiet())
        wait_until(lambda: control.holding, timeout=5, what="the watchdog")
        hold_at, reason, deadline = control.stats.holds_entered[-1]
        assert reason == "watchdog"
        assert deadline <= hold_at <= deadline + 0.050, (
            f"{1000 * (hold_at - deadline):.0f} ms from the deadline"
        )
        assert control._episode is not None  # a quiet trainer pauses the episode; it does not abort it
        assert session.state != "disconnected"
    finally:
        agent.stop()
        server.stop()


async def _start_and_get_first_obs(session):
    session.send_command(pb.Command.START_EPISODE, seed=3)
    while True:
        obs = await session.next_observation(timeout=10)
        if obs.episode_id:
            return obs


async def _send_and_wait_for_error(
    session, message: pb.TrainerMessage, code: str, timeout: float = 5.0
) -> str:
    errors_before = session.stats.errors
    session.send_raw(message)
    deadline = time.monotonic() + timeout
    while session.stats.errors == errors_before:
        if time.monotonic() > deadline:
            raise AssertionError(f"no {code} error from the agent")
        await asyncio.sleep(0.01)
    assert session.stats.last_error.startswith(code), session.stats.last_error
    return session.stats.last_error


def test_malformed_and_stale_actions_are_rejected_and_the_robot_does_not_move(tmp_path):
    server = start_server()
    agent = start_agent(server.server.port, tmp_path, safety=SafetyConfig(max_action_age_ms=150))
    try:
        session = server.call(server.server.wait_for_robot(timeout=30))
        obs = server.call(_start_and_get_first_obs(session))
        start = tcp_of(agent)
        seq = obs.seq

        def chunk(values, obs_seq, n=1, dim=7):
            return pb.TrainerMessage(
                actions=pb.ActionChunk(obs_seq=obs_seq, chunk_len=n, action_dim=dim, values=values)
            )

        bad = [
            (chunk([0, 0, float("nan"), 0, 0, 0, 1], seq), "bad_action", "nan"),
            (chunk([0, 0, 1, 0, 0, 0], seq, dim=6), "bad_action", "shape"),
            (chunk([0, 0, 5.0, 0, 0, 0, 1], seq), "bad_action", "outside"),
            (chunk([0.0] * 7, seq, n=2), "bad_action", "carries 7 values"),
            (chunk([0, 0, 1, 0, 0, 0, 1], seq + 10_000), "bad_action", "newest sent"),
        ]
        for message, code, detail in bad:
            error = server.call(_send_and_wait_for_error(session, message, code))
            assert detail in error.lower()
        # Stale by age: answer an observation older than max_action_age_ms.
        time.sleep(0.3)
        error = server.call(_send_and_wait_for_error(session, chunk(UP, seq), "stale_action"))
        assert "ms old" in error
        assert agent.agent.control.stats.actions_executed == 0
        assert np.linalg.norm(tcp_of(agent) - start) < 2e-3
        # A message over the size limit breaks the stream, not the agent: it reconnects and serves on.
        server.call(_send_huge(session))
        wait_until(
            lambda: agent.agent.link.sessions >= 2 or not agent.is_alive(), what="the agent to reconnect"
        )
        assert agent.is_alive(), f"the agent died: {agent.error!r}"
        session = server.call(server.server.wait_for_robot(timeout=30))
        end = server.call(run_episode(session, constant_policy([0, 0, 0.2, 0, 0, 0, 1])), timeout=60)
        assert end.kind == pb.EpisodeEvent.ENDED
    finally:
        agent.stop()
        server.stop()


async def _send_huge(session) -> None:
    values = np.zeros(link_codec.MAX_MESSAGE_BYTES // 4 + 1024, np.float32).tolist()
    session.send_raw(
        pb.TrainerMessage(actions=pb.ActionChunk(obs_seq=0, chunk_len=1, action_dim=7, values=values))
    )


def test_workspace_box_holds_on_real_physics(tmp_path):
    top = 0.55  # the home pose is at z = 0.487
    server = start_server()
    safety = SafetyConfig(workspace_high=(*PANDA.workspace_high[:2], top))
    agent = start_agent(server.server.port, tmp_path, safety=safety)
    heights = []
    try:
        session = server.call(server.server.wait_for_robot(timeout=30))
        policy = constant_policy(UP)

        def recording_policy(obs):
            heights.append(tcp_of(agent)[2])
            return policy(obs)

        server.call(run_episode(session, recording_policy), timeout=60)
    finally:
        agent.stop()
        server.stop()
    assert heights[0] < top - 0.05  # it started well below the ceiling and was pushed up all episode
    assert max(heights) > top - 0.02  # it got there...
    assert max(heights) < top + 0.005  # ...and no further
    events = [e for o in server.server.sink.episodes[0].observations for e in o.transition.safety_events]
    assert "clipped:workspace" in events


def test_estop_stops_the_episode_and_refuses_all_later_actions(tmp_path):
    server = start_server()
    agent = start_agent(server.server.port, tmp_path)
    control = agent.agent.control
    try:
        session = server.call(server.server.wait_for_robot(timeout=30))
        asyncio.run_coroutine_threadsafe(run_episode(session, constant_policy(UP)), server.loop)
        wait_until(lambda: control.stats.actions_executed >= 5, what="motion")
        server.loop.call_soon_threadsafe(session.send_command, pb.Command.ESTOP)
        wait_until(lambda: control.estopped and control._episode is None, timeout=5, what="the e-stop")
        executed = control.stats.actions_executed
        obs = server.call(session.next_observation(timeout=5))
        error = server.call(
            _send_and_wait_for_error(
                session,
                pb.TrainerMessage(actions=link_codec.chunk_to_proto(np.array([UP]), obs.seq)),
                "estop",
            )
        )
        assert "restart the agent" in error
        server.loop.call_soon_threadsafe(lambda: session.send_command(pb.Command.START_EPISODE, seed=1))
        time.sleep(0.5)
        assert control._episode is None
        assert control.stats.actions_executed == executed
        wait_until(
            lambda: any(e.end.reason == "e-stop" for e in server.server.sink.episodes), what="the record"
        )
        (stopped,) = [e for e in server.server.sink.episodes if e.end.reason == "e-stop"]
        assert stopped.aborted
    finally:
        agent.stop()
        server.stop()


def test_an_episode_whose_robot_leaves_ends_typed_as_robot_left(tmp_path):
    server = start_server()
    agent = start_agent(server.server.port, tmp_path)
    try:
        session = server.call(server.server.wait_for_robot(timeout=30))
        finished = server.call(run_episode(session, constant_policy([0, 0, 0, 0, 0, 0, 1])), timeout=60)
        assert finished.kind == pb.EpisodeEvent.ENDED and not finished.robot_left
        running = asyncio.run_coroutine_threadsafe(
            run_episode(session, constant_policy([0, 0, 0, 0, 0, 0, 1])), server.loop
        )
        wait_until(lambda: agent.agent.control.stats.actions_executed >= finished.num_steps + 5, what="steps")
        agent.stop()  # the robot goes away mid-episode
        left = running.result(timeout=30)
        assert left.robot_left and left.kind == pb.EpisodeEvent.ABORTED
    finally:
        agent.stop()
        server.stop()


def test_a_physics_blow_up_on_the_twin_aborts_the_episode_and_is_never_a_success(tmp_path):
    from sim_envs.scripted import scripted_policy

    server = start_server()
    # From seed 0 under the twin's reality gap the expert succeeds at step 49 of reach's 50: a held
    # tick on a loaded machine (a late action: the arm stops where it is) ran it out of steps once
    # in CI. The horizon leaves it room; the episode ends at the blow-up either way.
    driver = {"privileged_state": True, "cameras": [], "max_episode_steps": 150}
    agent = start_agent(server.server.port, tmp_path, driver=driver)
    try:
        session = server.call(server.server.wait_for_robot(timeout=30))
        expert = scripted_policy(session.spec)
        twin = agent.agent.driver.env
        succeeded = []

        def reach_then_blow_up(obs: pb.Observation) -> np.ndarray:
            if obs.transition.success:
                succeeded.append(obs.step)
                twin.data.qvel[:] = 1e20  # MuJoCo detects this at its next step and resets its state
            return expert.act({"state": np.asarray(obs.state, np.float32)})[None]

        end = server.call(run_episode(session, reach_then_blow_up), timeout=60)
        assert succeeded, "the expert never reached the goal: the test proves nothing"
        assert end.kind == pb.EpisodeEvent.ABORTED and "physics went unstable" in end.reason
        assert not end.success
    finally:
        agent.stop()
        server.stop()


def test_a_corrupt_measured_pose_holds_the_robot_and_aborts_instead_of_sending_it_nan(tmp_path):
    server = start_server()
    agent = start_agent(server.server.port, tmp_path, driver={"cameras": []})
    driver, applied, corrupt, seen_bad = agent.agent.driver, [], [], []
    observe, apply = driver.observe, driver.apply
    quat = driver.spec.state_slices()["tcp_quat"]

    def observe_then_corrupt():
        reading = observe()
        if corrupt:
            reading.state[quat] = 0.0  # a driver bug or a bad packet: not an orientation
            seen_bad.append(True)
        return reading

    def recording_apply(action):  # (was the state it was limited against already bad, the action)
        applied.append((bool(seen_bad), np.asarray(action).copy()))
        return apply(action)

    driver.observe, driver.apply = observe_then_corrupt, recording_apply
    try:
        session = server.call(server.server.wait_for_robot(timeout=30))

        def turn_then_corrupt(obs: pb.Observation) -> np.ndarray:
            if obs.step == 5:
                corrupt.append(True)
            return np.array([[0.1, 0, 0, 0, 0, 0.5, 1]], np.float32)

        end = server.call(run_episode(session, turn_then_corrupt), timeout=60)
        assert end.kind == pb.EpisodeEvent.ABORTED and "unsafe robot state" in end.reason
        assert "tcp_quat is not a unit quaternion" in end.reason
        assert any(not bad for bad, _ in applied)  # it moved before the state went bad ...
        assert all(np.isfinite(a).all() for _, a in applied)  # ... and never got a non-finite command
        assert not [a for bad, a in applied if bad]  # nothing at all once the state was bad
        assert agent.agent.control.holding
    finally:
        agent.stop()
        server.stop()


def test_a_policy_slower_than_its_chunk_stalls_the_episode_which_is_stopped_aborted_with_the_reason(tmp_path):
    server = start_server()
    agent = start_agent(server.server.port, tmp_path)
    try:
        session = server.call(server.server.wait_for_robot("twin-0", timeout=30))

        async def slow_policy(observation):  # 300 ms per answer, for a 1-action chunk (50 ms at 20 Hz)
            await asyncio.sleep(0.3)
            return np.asarray([UP], np.float32)

        end = server.call(run_episode(session, slow_policy, stall_timeout_s=1.5), timeout=60)
        assert end.kind == pb.EpisodeEvent.ABORTED and not end.success and not end.robot_left
        assert (
            "arrive stale" in end.reason and "answers in 3" in end.reason and "50 ms at 20 Hz" in end.reason
        )
        assert end.num_steps == 0  # no chunk ran: the robot only held
        # The robot is free for the next episode: a policy that keeps up runs it to its end.
        end = server.call(run_episode(session, constant_policy(UP)), timeout=60)
        assert end.kind == pb.EpisodeEvent.ENDED and end.num_steps > 0
    finally:
        agent.stop()
        server.stop()


def test_after_one_slow_answer_the_trainer_answers_the_newest_observation_and_the_episode_runs_on(tmp_path):
    server = start_server()
    agent = start_agent(server.server.port, tmp_path, driver={"max_episode_steps": 40})
    try:
        session = server.call(server.server.wait_for_robot("twin-0", timeout=30))
        answers = 0

        async def once_slow_policy(observation):  # 600 ms once (a backlog of ~12 ticks), then 60 ms
            nonlocal answers
            answers += 1
            await asyncio.sleep(0.6 if answers == 1 else 0.06)
            return np.asarray([UP] * 3, np.float32)  # a chunk of 3 lasts 150 ms at 20 Hz

        # Answering the backlog oldest first kept every answer a tick late, and the episode stalled.
        end = server.call(run_episode(session, once_slow_policy, stall_timeout_s=3.0), timeout=60)
        assert end.kind == pb.EpisodeEvent.ENDED and end.num_steps == 40, end
    finally:
        agent.stop()
        server.stop()
