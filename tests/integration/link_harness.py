"""Real trainer link servers and real agents (sim-twin driver) on loopback, for integration tests."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos import robot_link_pb2_grpc as pb_grpc
from robot_agent.agent import Agent, AgentThread
from robot_agent.config import AgentConfig, LinkConfig
from robot_agent.drivers import make_driver
from robot_agent.safety import SafetyConfig
from trainer.server.auth import ServerAuthConfig
from trainer.server.link_budgets import LinkLimits
from trainer.server.link_server import LinkServer, LinkServerConfig, LinkServerThread

# For tests that send refused messages back to back on purpose: the misbehaviour penalty (which
# makes the next session from the same credential and host wait) is lifted.
NO_PENALTY = LinkLimits(bad_sessions_per_s=1e6, bad_bytes_per_s=1e12)
TWIN = {"task": "reach", "control_hz": 20.0, "cameras": ["front", "wrist"], "image_size": 64}


def start_server(
    auth: ServerAuthConfig | None = None,
    port: int = 0,
    frame_ring: bool = True,
    limits: LinkLimits | None = None,
) -> LinkServerThread:
    config = LinkServerConfig(
        host="127.0.0.1",
        port=port,
        auth=auth or ServerAuthConfig(insecure=True),
        frame_ring=frame_ring,
        limits=limits or LinkLimits(),
    )
    return LinkServerThread(LinkServer(config)).start()


def start_agent(
    port: int,
    spool: Path,
    robot_id: str = "twin-0",
    driver: dict[str, Any] | None = None,
    safety: SafetyConfig | None = None,
    teleop=None,
    previous_action_in_state: bool = False,
    **link: Any,
) -> AgentThread:
    link.setdefault("insecure", not link.get("tls_ca"))
    link.setdefault("reconnect_initial_s", 0.05)
    link.setdefault("reconnect_max_s", 0.5)
    config = AgentConfig(
        robot_id=robot_id,
        spool_dir=str(spool),
        safety=safety or SafetyConfig(),
        previous_action_in_state=previous_action_in_state,
        link=LinkConfig(server=f"127.0.0.1:{port}", **link),
    )
    driver_obj = make_driver("sim-twin", {**TWIN, **(driver or {})})
    return AgentThread(Agent(driver_obj, config, teleop=teleop)).start()


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def constant_policy(action: list[float]) -> Callable:
    chunk = np.asarray([action], np.float32)
    return lambda obs: chunk


def tcp_of(agent: AgentThread) -> np.ndarray:
    """The sim twin's true TCP position (read-only peek at the physics)."""
    return agent.agent.driver.env.scene.tcp_pos.copy()


async def answer_episode(session, steps: int, chunk_for: Callable) -> list:
    """Start an episode on ``session`` and answer its first ``steps`` observations with
    ``chunk_for(step, observation)``; returns those observations."""
    session.send_command(pb.Command.START_EPISODE, seed=0)
    answered, last = [], -1
    while len(answered) < steps:
        obs = await session.next_observation(last, timeout=5)
        last = obs.seq
        if obs.episode_id:
            session.send_actions(np.asarray(chunk_for(len(answered), obs), np.float32), obs.seq)
            answered.append(obs)
    return answered


class RawClient:
    """A client that sends whatever it is given, and collects what comes back and how the call ended."""

    def __init__(self, port: int, token: str | None = None, own_connection: bool = False) -> None:
        # ``own_connection``: a TCP connection of its own (grpc otherwise shares one between the
        # channels of a process, and its HTTP/2 stream cap queues what is past it).
        options = [
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.use_local_subchannel_pool", int(own_connection)),
        ]
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=options)
        self.outbox: queue.Queue = queue.Queue()
        self.replies: list[pb.TrainerMessage] = []
        self.status: grpc.StatusCode | None = None
        self.details = ""
        self.trailing: dict[str, str] = {}
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
            self.trailing = dict(exc.trailing_metadata() or ())

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
