"""Hostile and broken peers on the real link: one robot must never take down the trainer, another
robot, or its own session's neighbours. The hostile client is written from ``robot_link.proto`` alone."""

from __future__ import annotations

import logging
import math
import threading
import time

import grpc
import numpy as np
import pytest

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
from protos.pose_math import matrix_to_rotvec, quat_to_matrix
from robot_agent.safety import SafetyConfig
from tests.integration.link_harness import (
    NO_PENALTY,
    RawClient,
    answer_episode,
    start_agent,
    start_server,
    wait_until,
)
from trainer.server.auth import ServerAuthConfig
from trainer.server.episodes import MemoryEpisodeSink
from trainer.server.link_server import LinkServer, LinkServerConfig, LinkServerThread

pytestmark = pytest.mark.slow
SHORT = {"max_episode_steps": 20}


def small_spec(**changes) -> pb.EnvSpec:
    spec = EnvSpec(
        "hostile",
        (CameraSpec("front", 8, 8, 10.0),),
        (StateField("tcp_pos", 3),),
        ee_delta_action_space(),
        10.0,
        "",
        5,
    )
    message = link_codec.spec_to_proto(spec)
    for key, value in changes.items():
        setattr(message, key, value)
    return message


def register(robot_id: str = "hostile", spec: pb.EnvSpec | None = None, **fields) -> pb.AgentMessage:
    return pb.AgentMessage(
        register=pb.Register(
            robot_id=robot_id,
            protocol_version=link_codec.PROTOCOL_VERSION,
            spec=spec or small_spec(),
            **fields,
        )
    )


def observation(
    seq: int, step: int, episode_id: str = "ep", state=(0.5, 0.0, 0.3), **fields
) -> pb.AgentMessage:
    image = np.zeros((8, 8, 3), np.uint8)
    return pb.AgentMessage(
        observation=pb.Observation(
            seq=seq,
            episode_id=episode_id,
            step=step,
            state=list(state),
            frames=[link_codec.encode_frame("front", image, "raw")],
            **fields,
        )
    )


def transition(**fields) -> pb.Transition:
    return pb.Transition(executed_action=[0.0] * 7, **fields)


def episode(episode_id: str, steps: int = 2, seq0: int = 0) -> list[pb.AgentMessage]:
    messages = [observation(seq0, 0, episode_id)]
    messages += [observation(seq0 + i, i, episode_id, transition=transition()) for i in range(1, steps + 1)]
    end = pb.EpisodeEvent(kind=pb.EpisodeEvent.ENDED, episode_id=episode_id, num_steps=steps)
    return [*messages, pb.AgentMessage(episode_event=end)]


@pytest.fixture
def server():
    served = start_server(limits=NO_PENALTY)
    yield served
    served.stop()


def refusal(server, message: pb.AgentMessage) -> tuple[grpc.StatusCode, str]:
    client = RawClient(server.server.port).send(message)
    try:
        return client.ended(), client.details
    finally:
        client.close()


def test_registrations_over_the_memory_budget_or_the_spec_bounds_are_refused_at_once(server):
    refused_before = server.server.refused
    # The reported attack: a 4096x4096 camera and 30-step episodes (about 50 MB per raw observation).
    huge_camera = small_spec(max_episode_steps=30)
    huge_camera.cameras[0].height = huge_camera.cameras[0].width = 4096
    code, details = refusal(server, register(spec=huge_camera))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_session_bytes" in details
    # 1.4 M cameras in a 28 MB spec; a state of 2 x 2**32 values; a NaN or absurd control rate.
    many = small_spec()
    many.cameras.extend([pb.CameraSpec(name=f"c{i}", height=1, width=1, fps=1) for i in range(1_400_000)])
    started = time.monotonic()
    assert refusal(server, register(spec=many))[0] == grpc.StatusCode.INVALID_ARGUMENT
    refused_in_s = time.monotonic() - started
    wide = small_spec()
    wide.state_fields.extend(
        [pb.StateField(name="a", size=2**32 - 1), pb.StateField(name="b", size=2**32 - 1)]
    )
    for spec in (
        wide,
        small_spec(control_hz=math.nan),
        small_spec(control_hz=1e9),
        small_spec(max_episode_steps=0),
    ):
        code, details = refusal(server, register(spec=spec))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "invalid env spec" in details, details
    assert server.server.refused - refused_before == 6
    assert not server.server.sessions  # nothing was kept for any of them
    print(f"1.4 M-camera registration refused in {refused_in_s:.2f} s")


def test_a_bad_step_ends_only_that_robots_stream_with_a_status_naming_the_field(server, tmp_path):
    honest = start_agent(server.server.port, tmp_path / "spool", driver=SHORT)
    try:
        wait_until(lambda: "twin-0" in server.server.sessions, what="the honest robot")
        cases = [
            (observation(1, 0, state=(math.nan, 0.0, 0.3)), "state[0] is not finite"),
            (observation(1, 0, state=(0.5, 0.0)), "state has 2 values, expected 3"),
            (observation(1, 1, transition=transition(reward=math.inf)), "transition.reward"),
            (observation(1, 1, transition=pb.Transition(executed_action=[0.0] * 3)), "executed_action has 3"),
            (observation(1, 9), "past max_episode_steps"),
        ]
        wrong_size = observation(1, 0)
        wrong_size.observation.frames[0].data = b"\0" * 10
        cases.append((wrong_size, "raw frame has 10 bytes"))
        for bad, message in cases:
            client = RawClient(server.server.port).send(register(), bad)
            assert client.ended() == grpc.StatusCode.INVALID_ARGUMENT, (message, client.details)
            assert message in client.details, client.details
            client.close()
        # A replayed sequence number is refused too, not stored.
        client = RawClient(server.server.port).send(register(), observation(5, 0), observation(5, 0))
        assert client.ended() == grpc.StatusCode.INVALID_ARGUMENT and "seq 5" in client.details
        client.close()
        session = server.server.sessions["twin-0"]
        before = session.stats.observations
        wait_until(
            lambda: session.stats.observations > before + 5, timeout=5, what="the honest robot streaming on"
        )
        assert session.state != "disconnected"
    finally:
        honest.stop()


def test_a_garbage_first_message_is_invalid_argument_not_unknown(server):
    channel = grpc.insecure_channel(f"127.0.0.1:{server.server.port}")
    raw = channel.stream_stream(
        "/rlinf.link.v1.RobotLink/Session", request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    with pytest.raises(grpc.RpcError) as error:
        list(raw(iter([b"\xff\xff\xff\xff garbage"]), timeout=10))
    channel.close()
    assert error.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INTERNAL)
    assert error.value.code() != grpc.StatusCode.UNKNOWN


def test_nobody_takes_over_a_live_robot_id_without_its_resume_token(server, tmp_path):
    honest = start_agent(server.server.port, tmp_path / "spool", driver=SHORT)
    try:
        wait_until(lambda: honest.agent.link.sessions == 1, what="the honest robot")
        session = server.server.sessions["twin-0"]
        code, details = refusal(server, register("twin-0", resume_token="guessed"))
        assert code == grpc.StatusCode.ALREADY_EXISTS and "already connected" in details
        assert server.server.sessions["twin-0"] is session and session.state != "disconnected"
        # The same agent, reconnecting while the trainer still holds its session, proves itself.
        assert honest.agent.link.resume_token == session.resume_token
        server.call(session.close())  # the trainer ends the stream with OK: a link loss, not a crash
        wait_until(lambda: honest.agent.link.sessions == 2, what="the agent to reconnect")
        assert honest.is_alive() and honest.error is None
    finally:
        honest.stop()


def test_robot_ids_are_bound_to_their_own_tokens(tmp_path):
    tokens = {"arm-a": "a" * 20, "arm-b": "b" * 20}
    served = start_server(ServerAuthConfig(insecure=True, robot_tokens=tokens))
    try:
        assert RawClient(served.server.port, token="x" * 20).send(register("arm-a")).ended() == (
            grpc.StatusCode.UNAUTHENTICATED
        )
        stolen = RawClient(served.server.port, token=tokens["arm-b"]).send(register("arm-a"))
        assert (
            stolen.ended() == grpc.StatusCode.PERMISSION_DENIED and "bound to its own token" in stolen.details
        )
        unlisted = RawClient(served.server.port, token=tokens["arm-b"]).send(register("arm-c"))
        assert unlisted.ended() == grpc.StatusCode.PERMISSION_DENIED
        own = RawClient(served.server.port, token=tokens["arm-a"]).send(register("arm-a"))
        wait_until(lambda: own.replies and own.replies[0].HasField("welcome"), what="arm-a's welcome")
        own.close()
    finally:
        served.stop()


def test_episode_ids_are_scoped_by_robot_and_acked_only_when_written(server):
    first = RawClient(server.server.port).send(register("a"), *episode("shared-id"))
    wait_until(lambda: any(r.HasField("ack") for r in first.replies), what="a's ack")
    second = RawClient(server.server.port).send(register("b"), *episode("shared-id"))
    wait_until(lambda: any(r.HasField("ack") for r in second.replies), what="b's ack")
    first.close()
    second.close()
    stored = [(e.robot_id, e.episode_id) for e in server.server.sink.episodes]
    assert stored == [("a", "shared-id"), ("b", "shared-id")]  # b's was written, not just acknowledged


class GatedSink(MemoryEpisodeSink):
    """Stores robot ``slow``'s episodes only when the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def store(self, episode) -> None:
        if episode.robot_id == "slow":
            self.gate.wait(60)
        super().store(episode)


def test_one_robots_slow_store_does_not_hold_up_another_robots_episodes():
    sink = GatedSink()
    served = LinkServerThread(LinkServer(LinkServerConfig(host="127.0.0.1", port=0), sink=sink)).start()
    try:
        slow = RawClient(served.server.port).send(register("slow"), *episode("s1"))
        wait_until(lambda: served.server.assemblers.get("slow") is not None, what="the slow robot")
        time.sleep(0.2)  # its episode is in the store, blocked
        fast = RawClient(served.server.port).send(
            register("fast"), *episode("f1"), *episode("f2", seq0=10), *episode("f3", seq0=20)
        )
        wait_until(
            lambda: sum(1 for r in fast.replies if r.HasField("ack")) == 3, what="the fast robot's acks"
        )
        assert [e.episode_id for e in sink.episodes] == ["f1", "f2", "f3"]
        sink.gate.set()
        wait_until(lambda: any(r.HasField("ack") for r in slow.replies), what="the slow robot's ack")
        slow.close()
        fast.close()
    finally:
        sink.gate.set()
        served.stop()


def test_a_robots_stream_reads_on_while_its_episode_is_stored_and_its_stores_stay_in_order():
    # A video encode takes seconds: the robot's next episode (its STARTED event, its observations)
    # must reach the trainer meanwhile, or a reset waits for the encode while the robot holds.
    sink = GatedSink()
    served = LinkServerThread(LinkServer(LinkServerConfig(host="127.0.0.1", port=0), sink=sink)).start()
    try:
        slow = RawClient(served.server.port).send(
            register("slow"), *episode("s1"), *episode("s2", seq0=10), *episode("s3", seq0=20),
            observation(30, 0, "s4"),
        )  # fmt: skip
        wait_until(lambda: "slow" in served.server.sessions, what="the slow robot")
        session = served.server.sessions["slow"]
        latest = lambda: session.latest.seq if session.latest is not None else -1  # noqa: E731
        # The gate holds s1's store: s2's and s3's observations are still read. s3's end is a third
        # store in flight, over the two allowed: s4 waits (back-pressure on this robot alone).
        wait_until(lambda: latest() == 22, what="s3's observations")
        time.sleep(0.3)
        assert latest() == 22 and not any(r.HasField("ack") for r in slow.replies)
        sink.gate.set()
        wait_until(lambda: sum(1 for r in slow.replies if r.HasField("ack")) == 3, what="three acks")
        wait_until(lambda: latest() == 30, what="s4's first observation")
        assert [e.episode_id for e in sink.episodes] == ["s1", "s2", "s3"]
        assert [r.ack.episode_id for r in slow.replies if r.HasField("ack")] == ["s1", "s2", "s3"]
        slow.close()
    finally:
        sink.gate.set()
        served.stop()


def test_a_graceful_stop_waits_for_a_store_longer_than_any_call_timeout(caplog):
    # A long episode's video encode can outlast the link thread's call timeout: stopping the trainer
    # then waits for it and says so, instead of raising TimeoutError with the episode half-written.
    sink = GatedSink()
    served = LinkServerThread(LinkServer(LinkServerConfig(host="127.0.0.1", port=0), sink=sink)).start()
    served.call_timeout_s = 0.3
    slow = RawClient(served.server.port).send(register("slow"), *episode("s1"))
    try:
        wait_until(lambda: served.server.assemblers.get("slow") is not None, what="the slow robot")
        time.sleep(0.2)  # its episode is in the store, blocked
        errors: list[BaseException] = []

        def stop() -> None:
            try:
                served.stop(grace=0.1)
            except BaseException as exc:  # the test reports whatever it raised
                errors.append(exc)

        with caplog.at_level(logging.INFO, logger="trainer.server.link_server"):
            stopping = threading.Thread(target=stop)
            stopping.start()
            time.sleep(1.0)  # over three call timeouts
            assert stopping.is_alive() and not sink.episodes
            sink.gate.set()
            stopping.join(10)
        assert not stopping.is_alive() and not errors, errors
        assert [e.episode_id for e in sink.episodes] == ["s1"]
        assert "waiting for 1 episode write(s)" in caplog.text
    finally:
        sink.gate.set()
        slow.close()
        served.stop()


def test_the_agent_holds_at_once_when_the_link_drops(tmp_path):
    served = start_server()
    agent = start_agent(served.server.port, tmp_path / "spool", driver={**SHORT, "control_hz": 10.0})
    control = agent.agent.control
    try:
        wait_until(lambda: "twin-0" in served.server.sessions, what="the robot")
        session = served.server.sessions["twin-0"]

        async def drive_then_drop():
            session.send_command(pb.Command.START_EPISODE, seed=0)
            last, answered = -1, 0
            while answered < 5:
                obs = await session.next_observation(last, timeout=5)
                last = obs.seq
                if obs.episode_id:
                    session.send_actions(np.zeros((1, 7), np.float32), obs.seq)
                    answered += 1

        served.call(drive_then_drop())
        wait_until(lambda: not control.holding, what="the robot to move")
    finally:
        served.stop(grace=None)  # as a killed trainer
    try:
        wait_until(lambda: control.link_lost_at is not None and control.holding, what="the hold")
        hold_at, reason, _ = next(h for h in control.stats.holds_entered if h[0] >= control.link_lost_at)
        assert reason == "link down"
        assert hold_at - control.link_lost_at <= 0.050, f"{1000 * (hold_at - control.link_lost_at):.0f} ms"
    finally:
        agent.stop()


def test_the_measured_tcp_stays_in_the_box_and_the_orientation_in_its_bound_under_saturated_actions(tmp_path):
    # A trainer sends valid but hostile chunks: full speed and full turn rate into one corner of a
    # small box, then into the opposite one. The limits must hold on what the arm *measures*.
    safety = SafetyConfig(workspace_low=(0.25, -0.12, 0.2), workspace_high=(0.45, 0.12, 0.55))
    served = start_server()
    agent = start_agent(
        served.server.port, tmp_path / "spool", driver={"max_episode_steps": 400}, safety=safety
    )
    try:
        wait_until(lambda: "twin-0" in served.server.sessions, what="the robot")
        session = served.server.sessions["twin-0"]
        push = [
            np.array([[1, 1, 1, 1, 1, 1, -1]], np.float32),
            np.array([[-1, -1, -1, -1, -1, -1, 1]], np.float32),
        ]
        answered = served.call(answer_episode(session, 120, lambda step, obs: push[step // 60]))
    finally:
        agent.stop()
        served.stop()
    states = np.asarray([obs.state for obs in answered], np.float64)
    position, quat = states[:, 14:17], states[:, 17:21]
    low, high = np.asarray(safety.workspace_low), np.asarray(safety.workspace_high)
    beyond = np.linalg.norm(np.maximum(0.0, np.maximum(low - position, position - high)), axis=1)
    moves = np.linalg.norm(np.diff(position, axis=0), axis=1)
    start = quat_to_matrix(quat[0])
    turns = [np.linalg.norm(matrix_to_rotvec(quat_to_matrix(q) @ start.T)) for q in quat]
    brake_distance = safety.max_target_lead_m
    assert beyond.max() <= brake_distance, f"{1000 * beyond.max():.1f} mm beyond the box"
    assert moves.max() <= safety.max_translation_m, f"moved {1000 * moves.max():.1f} mm in one step"
    assert max(turns) <= safety.max_orientation_change_rad + safety.max_rotation_lead_rad, (
        f"{max(turns):.2f} rad"
    )
    # It did go to the walls (the test would pass on an arm that never moved otherwise).
    first, then = position[:60], position[60:]
    assert (first.max(axis=0) > high - 0.01).all(), "the first push did not reach its corner"
    assert (then.min(axis=0) < first.max(axis=0) - 0.1).all(), "the second push did not turn back"


@pytest.mark.parametrize("health_requires_token", [False, True])
def test_health_asks_for_the_token_when_configured_and_reflection_always_does(health_requires_token):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    config = LinkServerConfig(
        host="127.0.0.1",
        port=0,
        auth=ServerAuthConfig(insecure=True, token="s3cret"),
        reflection=True,
        health_requires_token=health_requires_token,
    )
    served = LinkServerThread(LinkServer(config)).start()
    channel = grpc.insecure_channel(f"127.0.0.1:{served.server.port}")
    with_token = (("authorization", "Bearer s3cret"),)
    check = health_pb2.HealthCheckRequest(service="rlinf.link.v1.RobotLink")
    list_services = reflection_pb2.ServerReflectionRequest(list_services="")
    try:
        health = health_pb2_grpc.HealthStub(channel)
        assert (
            health.Check(check, timeout=5, metadata=with_token).status
            == health_pb2.HealthCheckResponse.SERVING
        )
        if health_requires_token:
            with pytest.raises(grpc.RpcError) as refused:
                health.Check(check, timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        else:
            assert health.Check(check, timeout=5).status == health_pb2.HealthCheckResponse.SERVING
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            list(reflect.ServerReflectionInfo(iter([list_services]), timeout=5))
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        answers = list(reflect.ServerReflectionInfo(iter([list_services]), timeout=5, metadata=with_token))
        names = {s.name for s in answers[0].list_services_response.service}
        assert "rlinf.link.v1.RobotLink" in names
    finally:
        channel.close()
        served.stop()


def test_link_probes_are_echoed_and_a_probe_flood_or_a_huge_probe_ends_the_stream(server):
    """link.codec=auto's probes: each is answered with its id and no padding; beyond the allowance
    (a burst of 16, then 4 a second) or the size limit the stream ends, naming the limit."""
    client = RawClient(server.server.port).send(
        register(), pb.AgentMessage(probe=pb.LinkProbe(id=7, padding=b"x" * 1000))
    )
    wait_until(lambda: len(client.replies) >= 2, what="the probe's echo")
    welcome, echo = client.replies[:2]
    assert welcome.welcome.echoes_probes
    assert echo.WhichOneof("body") == "probe_echo" and echo.probe_echo.id == 7 and not echo.probe_echo.padding
    client.close()
    huge = pb.AgentMessage(probe=pb.LinkProbe(id=1, padding=bytes(link_codec.MAX_PROBE_BYTES + 1)))
    flood = [pb.AgentMessage(probe=pb.LinkProbe(id=i)) for i in range(40)]
    for messages, limit in (([huge], "probe.padding has 2097153 bytes"), (flood, "probes are at most")):
        client = RawClient(server.server.port).send(register(), *messages)
        assert client.ended() == grpc.StatusCode.INVALID_ARGUMENT, client.details
        assert limit in client.details
        client.close()
