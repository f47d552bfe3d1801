"""LeRobot's async-inference protocol, served: robots that run LeRobot's ``RobotClient``
(``python -m lerobot.async_inference.robot_client``) get actions from a policy trained here with no
change on the robot side.

The service is LeRobot's ``transport.AsyncInference`` (gRPC): ``Ready`` opens a session,
``SendPolicyInstructions`` sends the policy setup (which policy the robot asks for, its observation
features, ``actions_per_chunk``), ``SendObservations`` streams a pickled ``TimedObservation`` in
2 MB parts, and ``GetActions`` waits (``obs_queue_timeout_s``) for the newest observation and
answers with a pickled chunk of ``TimedAction`` (an empty answer when none came). As LeRobot's own
server does, an observation is skipped when its step was answered already or its state is within
``similar_state_atol`` of the last one answered, unless the robot's queue ran empty (``must_go``).
Whatever policy the robot names, the answer is ours (``eval.policy_path``); the name is logged.

LeRobot's client speaks plaintext gRPC and sends no token: this server answers only the addresses
in ``allowed_peers`` (loopback by default) and caps what each message may hold. Such a robot has
none of ``rlinf-robot``'s local safety (watchdog, workspace box, NaN checks) unless its own client
provides it: the server says so in its log once per connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from protos.env_spec import EnvSpec
from protos.field_limits import MAX_INSTRUCTION_CHARS
from trainer.server.lerobot_wire import (
    PolicySetup,
    TimedObservation,
    WireError,
    dump_timed_actions,
    load_policy_setup,
    load_timed_observation,
)
from trainer.server.policy_driver import PolicyDriver

log = logging.getLogger(__name__)
SERVICE = "transport.AsyncInference"
PART_BYTES = 4 * 1024 * 1024  # one streamed part (LeRobot sends 2 MB parts; its own server's limit)
HEADROOM_BYTES = 64 * 1024  # per observation, beyond its pixels and state: keys, task, pickle framing
MAX_CAMERA_PIXELS = 3840 * 2160  # a robot's raw frame may be bigger than the policy's: it is resized
REMEMBERED_STEPS = 4096  # answered timesteps kept per robot (LeRobot's server keeps them all)


def _messages() -> dict[str, Any]:
    """LeRobot's four message types, in a descriptor pool of their own (LeRobot's generated module
    may be imported beside this one: the default pool would refuse the second ``transport.*``)."""
    file = descriptor_pb2.FileDescriptorProto(name="rlinf/lerobot_transport.proto", package="transport")
    file.syntax = "proto3"
    enum = file.enum_type.add(name="TransferState")
    for number, name in enumerate(("TRANSFER_UNKNOWN", "TRANSFER_BEGIN", "TRANSFER_MIDDLE", "TRANSFER_END")):
        enum.value.add(name=name, number=number)
    kinds = descriptor_pb2.FieldDescriptorProto
    layout = {
        "Observation": [("transfer_state", 1, kinds.TYPE_ENUM), ("data", 2, kinds.TYPE_BYTES)],
        "Actions": [("data", 1, kinds.TYPE_BYTES)],
        "PolicySetup": [("data", 1, kinds.TYPE_BYTES)],
        "Empty": [],
    }
    for name, fields in layout.items():
        message = file.message_type.add(name=name)
        for field_name, number, kind in fields:
            entry = message.field.add(name=field_name, number=number, type=kind, label=kinds.LABEL_OPTIONAL)
            if kind == kinds.TYPE_ENUM:
                entry.type_name = ".transport.TransferState"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"transport.{name}"))
        for name in layout
    }


MESSAGES = _messages()
TRANSFER_BEGIN, TRANSFER_MIDDLE, TRANSFER_END = 1, 2, 3


@dataclass(frozen=True)
class LerobotMapping:
    """Which of the robot's cameras is which of the policy's."""

    images: dict[str, str]  # the robot's camera name (LeRobot's key) -> our camera, e.g. {"front": "front"}
    similar_state_atol: float = 1.0  # LeRobot's rule: closer than this to the last answered state: skipped


def max_observation_bytes(spec: EnvSpec) -> int:
    """The largest pickled observation accepted (its cameras at up to 4K, which are resized)."""
    return (
        len(spec.cameras) * MAX_CAMERA_PIXELS * 3
        + spec.state_dim * 64
        + MAX_INSTRUCTION_CHARS * 4
        + HEADROOM_BYTES
    )


def setup_problem(setup: PolicySetup, spec: EnvSpec, mapping: LerobotMapping) -> str | None:
    """Why this robot's features do not fit the policy, or None."""
    if len(setup.state_names) != spec.state_dim:
        return (f"the robot's observation.state has {len(setup.state_names)} values, the policy reads "
                f"{spec.state_dim} ({spec.name})")  # fmt: skip
    missing = [camera for camera in mapping.images if camera not in setup.cameras]
    if missing:
        return f"the robot has no camera {missing} (lerobot.images); it has {sorted(setup.cameras)}"
    return None


def _resized(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize to the policy's camera size, as LeRobot's server resizes a robot's frames."""
    import torch

    tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float()
    tensor = torch.nn.functional.interpolate(
        tensor, size=(height, width), mode="bilinear", align_corners=False
    )
    return tensor[0].permute(1, 2, 0).round().clamp(0, 255).to(torch.uint8).numpy()


def to_observation(
    timed: TimedObservation, setup: PolicySetup, spec: EnvSpec, mapping: LerobotMapping
) -> dict[str, Any]:
    """A robot's raw LeRobot observation as ours (``images``, ``state``, ``instruction``)."""
    raw = timed.observation
    missing = [name for name in setup.state_names if name not in raw]
    if missing:
        raise WireError(f"the observation lacks the state values {missing[:8]}")
    values = [raw[name] for name in setup.state_names]
    if not all(isinstance(v, int | float | np.number) and not isinstance(v, bool) for v in values):
        raise WireError("the state values must be numbers")
    state = np.asarray(values, np.float32)
    if not np.isfinite(state).all():
        raise WireError("the state values must be finite")
    images = {}
    for robot_camera, camera in mapping.images.items():
        image = raw.get(robot_camera)
        expected = setup.cameras[robot_camera]
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.shape != expected:
            got = (
                f"{image.dtype}{list(image.shape)}" if isinstance(image, np.ndarray) else type(image).__name__
            )
            raise WireError(f"camera {robot_camera!r} must be uint8{list(expected)} as set up, got {got}")
        shape = spec.camera(camera).shape
        images[camera] = image if image.shape == shape else _resized(image, shape[0], shape[1])
    task = raw.get("task", "")
    if not isinstance(task, str) or len(task) > MAX_INSTRUCTION_CHARS:
        raise WireError(f"task must be text of at most {MAX_INSTRUCTION_CHARS} characters")
    return {"images": images, "state": state, "instruction": task or spec.instruction}


def peer_address(peer: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """gRPC's ``ipv4:1.2.3.4:567`` / ``ipv6:[::1]:567`` as an address (None for anything else)."""
    kind, _, rest = peer.partition(":")
    host = rest.rsplit(":", 1)[0].strip("[]") if kind in ("ipv4", "ipv6") else ""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


@dataclass
class RobotClientState:
    """One connected LeRobot client (keyed by its connection)."""

    setup: PolicySetup | None = None
    latest: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(maxsize=1))
    answered_steps: deque = field(default_factory=lambda: deque(maxlen=REMEMBERED_STEPS))
    last_state: np.ndarray | None = None
    answered_s: float = 0.0  # when it last got a chunk (monotonic)
    seen_s: float = field(default_factory=time.monotonic)


class LerobotPolicyServer:
    """Answers LeRobot async-inference robot clients with ``driver``'s policy."""

    def __init__(
        self,
        driver: PolicyDriver,
        mapping: LerobotMapping,
        host: str,
        port: int,
        allowed_peers: list[str] | tuple[str, ...] = ("127.0.0.1/32", "::1/128"),
        max_clients: int = 64,
        obs_queue_timeout_s: float = 2.0,
    ) -> None:
        self.driver, self.mapping, self.host, self.port = driver, mapping, host, port
        self.allowed = [ipaddress.ip_network(peer, strict=False) for peer in allowed_peers]
        self.max_clients, self.obs_queue_timeout_s = max_clients, obs_queue_timeout_s
        if set(mapping.images.values()) != set(driver.policy.cameras):
            raise WireError(
                f"lerobot.images must map a robot camera to each camera the policy reads "
                f"{list(driver.policy.cameras)}, got {mapping.images}"
            )
        self.clients: dict[str, RobotClientState] = {}
        self.answered = 0
        self.bound_port = 0

    # -- checks ---------------------------------------------------------------------------------

    async def _admit(self, context) -> str:
        address = peer_address(context.peer())
        if address is None or not any(address in network for network in self.allowed):
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{context.peer()[:80]} is not in lerobot.allowed_peers (LeRobot's client sends no token)",
            )
        return context.peer()

    async def _client(self, context, need_setup: bool = True) -> RobotClientState:
        peer = await self._admit(context)
        state = self.clients.get(peer)
        if state is None or (need_setup and state.setup is None):
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, "call Ready and SendPolicyInstructions first"
            )
        state.seen_s = time.monotonic()
        return state

    # -- the four calls -------------------------------------------------------------------------

    async def Ready(self, request, context):  # noqa: N802 (LeRobot's method names)
        peer = await self._admit(context)
        if peer not in self.clients and len(self.clients) >= self.max_clients:
            idle = min(self.clients, key=lambda p: self.clients[p].seen_s)
            if time.monotonic() - self.clients[idle].seen_s < 60:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many LeRobot clients")
            del self.clients[idle]
        if peer not in self.clients:
            log.warning(
                "LeRobot client %s connected (plaintext gRPC, no token): it has none of rlinf-robot's local "
                "safety (watchdog, workspace box, NaN checks) unless its own client provides it", peer,
            )  # fmt: skip
        self.clients[peer] = RobotClientState()  # a new session, as LeRobot's server resets on Ready
        return MESSAGES["Empty"]()

    async def SendPolicyInstructions(self, request, context):  # noqa: N802
        state = await self._client(context, need_setup=False)
        try:
            setup = load_policy_setup(request.data)
        except WireError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        problem = setup_problem(setup, self.driver.policy.spec, self.mapping)
        if problem is not None:
            log.warning("LeRobot client %s refused: %s", context.peer(), problem)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"the policy does not fit: {problem}")
        log.info("LeRobot client %s asked for %s %r (%d actions a chunk); it gets this server's policy",
                 context.peer(), setup.policy_type[:40], setup.pretrained_name_or_path[:120],
                 setup.actions_per_chunk)  # fmt: skip
        state.setup = setup
        return MESSAGES["Empty"]()

    async def SendObservations(self, request_iterator, context):  # noqa: N802
        state = await self._client(context)
        limit = max_observation_bytes(self.driver.policy.spec)
        parts: list[bytes] = []
        size = 0
        async for part in request_iterator:
            if part.transfer_state == TRANSFER_BEGIN:
                parts, size = [], 0
            elif part.transfer_state not in (TRANSFER_MIDDLE, TRANSFER_END):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "an observation part of unknown state")
            size += len(part.data)
            if size > limit:
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"an observation is at most {limit} bytes for this policy",
                )
            parts.append(part.data)
            if part.transfer_state == TRANSFER_END:
                break
        try:
            timed = load_timed_observation(b"".join(parts))
            obs = to_observation(timed, state.setup, self.driver.policy.spec, self.mapping)
        except WireError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if self._worth_answering(state, timed, obs["state"]):
            if state.latest.full():
                state.latest.get_nowait()  # only the newest observation is answered
            state.latest.put_nowait((timed, obs))
        return MESSAGES["Empty"]()

    def _worth_answering(
        self, state: RobotClientState, timed: TimedObservation, robot_state: np.ndarray
    ) -> bool:
        """LeRobot's server's rule: an empty queue on the robot, else a new step that moved enough;
        and ours: a robot that got no chunk for ``obs_queue_timeout_s`` is answered whatever it sends
        (LeRobot's client sends ``must_go`` once per chunk received: were that one observation
        skipped or lost, a robot standing still would never be answered again)."""
        if timed.must_go or state.last_state is None:
            return True
        if time.monotonic() - state.answered_s > self.obs_queue_timeout_s:
            return True
        if timed.timestep in state.answered_steps:
            return False
        return float(np.linalg.norm(robot_state - state.last_state)) >= self.mapping.similar_state_atol

    async def GetActions(self, request, context):  # noqa: N802
        state = await self._client(context)
        try:
            timed, obs = await asyncio.wait_for(state.latest.get(), self.obs_queue_timeout_s)
        except TimeoutError:
            return MESSAGES["Actions"]()  # LeRobot's client asks again
        state.answered_steps.append(timed.timestep)
        state.last_state, state.answered_s = obs["state"], time.monotonic()
        chunk = (await self.driver.act_async(obs))[: state.setup.actions_per_chunk]
        dt = 1.0 / self.driver.policy.spec.control_hz
        self.answered += 1
        return MESSAGES["Actions"](data=dump_timed_actions(chunk, timed.timestamp, timed.timestep, dt))

    # -- hosting --------------------------------------------------------------------------------

    def handler(self) -> grpc.GenericRpcHandler:
        empty, observation = MESSAGES["Empty"], MESSAGES["Observation"]

        def unary(method, request_type):
            return grpc.unary_unary_rpc_method_handler(
                method, request_deserializer=request_type.FromString, response_serializer=lambda m: m.SerializeToString()
            )  # fmt: skip

        return grpc.method_handlers_generic_handler(SERVICE, {
            "Ready": unary(self.Ready, empty),
            "SendPolicyInstructions": unary(self.SendPolicyInstructions, MESSAGES["PolicySetup"]),
            "GetActions": unary(self.GetActions, empty),
            "SendObservations": grpc.stream_unary_rpc_method_handler(
                self.SendObservations, request_deserializer=observation.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            ),
        })  # fmt: skip

    async def run(self, stop: asyncio.Event, started: asyncio.Event | None = None) -> None:
        """Serve until ``stop`` is set; ``started`` is set once the port is bound (``bound_port``)."""
        server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", PART_BYTES + HEADROOM_BYTES),
            ("grpc.max_send_message_length", PART_BYTES),
        ])  # fmt: skip
        server.add_generic_rpc_handlers((self.handler(),))
        self.bound_port = server.add_insecure_port(f"{self.host}:{self.port}")
        await server.start()
        log.info("answering LeRobot async-inference clients on %s:%d (plaintext, peers %s)",
                 self.host, self.bound_port, [str(n) for n in self.allowed])  # fmt: skip
        if started is not None:
            started.set()
        try:
            await stop.wait()
        finally:
            await server.stop(grace=1.0)


__all__ = [
    "LerobotMapping",
    "LerobotPolicyServer",
    "max_observation_bytes",
    "peer_address",
    "setup_problem",
    "to_observation",
]
