"""Hostile and broken peers on the real link: one robot must never take down the trainer, another
robot, or its own session's neighbours. The hostile client is written from ``robot_link.proto`` alone."""

from __future__ import annotations

import math
import queue
import threading
import time

import grpc
import numpy as np
import pytest

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos import robot_link_pb2_grpc as pb_grpc
from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
from tests.integration.link_harness import start_agent, start_server, wait_until
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


class RawClient:
    """A client that sends whatever it is given, and collects what comes back and how the call ended."""

    def __init__(self, port: int, token: str | None = None) -> None:
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)]
        )
        self.outbox: queue.Queue = queue.Queue()
        self.replies: list[pb.TrainerMessage] = []
        self.status: grpc.StatusCode | None = None
        self.details = ""
        metadata = link_codec.metadata_token(token) if token else None
        call = pb_grpc.RobotLinkStub(self.channel).Session(iter(self.outbox.get, None), metadata=metadata)
        self._thread = threading.Thread(target=self._read, args=(call,), daemon=True)
        self._thread.start()

    def _read(self, call) -> None:
        try:
            for reply in call:
                self.replies.append(reply)
            self.status = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            self.status, self.details = exc.code(), exc.details() or ""

    def send(self, *messages: pb.AgentMessage) -> RawClient:
        for message in messages:
            self.outbox.put(message)
        return self

    def ended(self, timeout: float = 20.0) -> grpc.StatusCode:
        self._thread.join(timeout)
        assert self.status is not None, "the call did not end"
        return self.status

    def close(self) -> None:
        self.outbox.put(None)
        self.channel.close()


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
    served = start_server()
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
        time.sleep(0.5)
        assert session.state != "disconnected" and session.stats.observations > before + 5
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
