"""The agent's side of the link: grpc asyncio, one bidirectional ``Session`` stream, reconnect with backoff.

The link only moves messages. Actions go to the control loop, which decides whether they are safe and
fresh; acknowledged episodes are deleted from the spool; unacknowledged ones are uploaded again after
every (re)connect. While the link is down the control loop holds the robot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from protos import field_limits, link_codec
from protos import robot_link_pb2 as pb
from robot_agent.config import LinkConfig
from robot_agent.control_loop import ControlLoop
from robot_agent.spool import EpisodeSpool

log = logging.getLogger(__name__)

# Statuses that mean "this agent, as configured, is not welcome": retrying cannot help.
_REFUSED = (
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.FAILED_PRECONDITION,
)
# Before the welcome, a registration the trainer cannot take is refused for good too.
_REFUSED_AT_REGISTRATION = (*_REFUSED, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)
# A TLS handshake that fails (wrong CA, expired or unknown certificate) reads as UNAVAILABLE.
_TLS_FAILURES = ("handshake", "certificate", "ssl_", "tsi_")


def _tls_reason(details: str) -> str:
    """gRPC's handshake error as what to check."""
    if "CERTIFICATE_VERIFY_FAILED" in details:
        return ("the trainer's certificate does not verify against --tls-ca (CERTIFICATE_VERIFY_FAILED): "
                "give the CA that signed it, and check that the address is in its subjectAltName")  # fmt: skip
    first = details.splitlines()[0] if details else "no details"
    return (f"{first[:160]}: check --tls-ca (the CA that signed the trainer's certificate), the client "
            "certificate and its dates")  # fmt: skip


PROBE_PAIRS_AT_CONNECT = 3
PROBE_TIMEOUT_S = 5.0


class LinkRefused(RuntimeError):
    """The trainer refused this agent (wrong token, certificate or protocol): retrying cannot help."""


class LinkLost(ConnectionError):
    """The session ended (by either side, with any status but a refusal): hold, back off, reconnect."""


class LinkBusy(LinkLost):
    """The trainer refused the session for now (over a session cap): retry after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def _retry_after(trailing_metadata) -> float | None:
    for key, value in trailing_metadata or ():
        if key == link_codec.RETRY_AFTER_KEY:
            try:
                return min(max(float(value), 0.0), 300.0)
            except ValueError:
                return None
    return None


SESSION_METHOD = f"/{pb.DESCRIPTOR.package}.RobotLink/Session"


@dataclass(frozen=True)
class _Probe:
    """A link probe, serialised already (``link_codec.probe_message_bytes``)."""

    probe_id: int
    data: bytes


def _probe(probe_id: int, padding: int) -> _Probe:
    return _Probe(probe_id, link_codec.probe_message_bytes(probe_id, padding))


Outgoing = pb.AgentMessage | bytes | _Probe  # bytes: an observation's AgentMessage, serialised


def _is_observation(message: Outgoing) -> bool:
    if isinstance(message, _Probe):
        return False
    return isinstance(message, bytes) or message.HasField("observation")


def _serialize(message: Outgoing) -> bytes:
    if isinstance(message, bytes):
        return message
    return message.data if isinstance(message, _Probe) else message.SerializeToString()


def channel_options() -> list[tuple[str, int | str]]:
    return [
        ("grpc.max_send_message_length", link_codec.MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", link_codec.MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 2000),  # notice a silently dead peer within a few seconds
        ("grpc.keepalive_timeout_ms", 2000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def make_channel(config: LinkConfig) -> grpc.aio.Channel:
    """An insecure channel only with ``insecure``; otherwise TLS, with a client certificate for mTLS."""
    options = channel_options()
    if config.insecure:
        return grpc.aio.insecure_channel(config.server, options=options)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(config.tls_ca),
        private_key=_read(config.tls_key),
        certificate_chain=_read(config.tls_cert),
    )
    if config.tls_server_name:
        options.append(("grpc.ssl_target_name_override", config.tls_server_name))
    return grpc.aio.secure_channel(config.server, credentials, options=options)


def _read(path: str | None) -> bytes | None:
    return Path(path).expanduser().read_bytes() if path else None


class LinkClient:
    """Keeps one session with the trainer alive for as long as the agent runs."""

    def __init__(
        self, config: LinkConfig, control: ControlLoop, spool: EpisodeSpool, robot_id: str, robot_kind: str
    ) -> None:
        self.config, self.control, self.spool = config, control, spool
        self.robot_id, self.robot_kind = robot_id, robot_kind
        self.sessions = 0  # sessions that got a welcome
        self.dropped_observations = 0
        self.resume_token = ""  # from the last welcome: lets a reconnect take over its own old session
        self._welcomed = False  # in the current session
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outbox: asyncio.Queue[pb.AgentMessage] | None = None
        self._pending_observations = 0
        self._count_lock = threading.Lock()
        self._uploads: set[asyncio.Task] = set()
        self._probe_id = 0
        self._probes_sent: dict[int, float] = {}  # probe id -> when it was written (perf_counter)
        self._probe_waiters: dict[int, asyncio.Future] = {}

    # -- called from the control thread ------------------------------------------------------------
    def send(self, message: pb.AgentMessage | bytes) -> None:
        """Queue a message for the trainer (``bytes``: an observation's ``AgentMessage``, serialised
        already); live observations are skipped while the link is down or slow."""
        loop, outbox = self._loop, self._outbox
        is_observation = _is_observation(message)
        if loop is None or outbox is None:
            return  # no session: the spool has everything that matters
        if is_observation:
            with self._count_lock:
                if self._pending_observations >= self.config.max_outbox_observations:
                    self.dropped_observations += 1
                    return
                self._pending_observations += 1
        with contextlib.suppress(RuntimeError):  # the loop is closing
            loop.call_soon_threadsafe(outbox.put_nowait, message)

    # -- the session loop --------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Connect, serve, and reconnect with jittered exponential backoff until ``stop`` is set."""
        self._loop = asyncio.get_running_loop()
        backoff = self.config.reconnect_initial_s
        while not stop.is_set():
            self._welcomed = False
            retry_after = 0.0
            try:
                await self._session(stop)
            except grpc.aio.AioRpcError as exc:
                try:
                    self._raise_if_refused(
                        exc.code(), exc.details() or "", _retry_after(exc.trailing_metadata())
                    )
                    await self._raise_if_tls_fails(exc.code())
                    log.warning("link to %s down: %s %s", self.config.server, exc.code().name, exc.details())
                except LinkBusy as busy:
                    retry_after = busy.retry_after_s
                    log.warning("link to %s: %s", self.config.server, busy)
            except LinkBusy as exc:
                retry_after = exc.retry_after_s
                log.warning("link to %s: %s", self.config.server, exc)
            except LinkLost as exc:
                log.warning("link to %s down: %s", self.config.server, exc)
            finally:
                self._outbox = None
                self.control.link_down()
            welcomed = self._welcomed
            if welcomed:
                backoff = self.config.reconnect_initial_s
            if stop.is_set():
                break
            delay = max(backoff * random.uniform(0.5, 1.0), retry_after * random.uniform(1.0, 1.5))
            backoff = min(backoff * 2.0, self.config.reconnect_max_s)
            log.info("reconnecting in %.2f s", delay)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    def _raise_if_refused(
        self, code: grpc.StatusCode, details: str, retry_after: float | None = None
    ) -> None:
        if retry_after is not None and code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise LinkBusy(
                f"the trainer is busy ({details}); retrying in about {retry_after:g} s", retry_after
            )
        refused = _REFUSED if self._welcomed else _REFUSED_AT_REGISTRATION
        if code in refused:
            raise LinkRefused(f"the trainer refused robot {self.robot_id!r}: {code.name}: {details}")
        if code == grpc.StatusCode.UNAVAILABLE and any(m in details.lower() for m in _TLS_FAILURES):
            raise LinkRefused(f"TLS with {self.config.server} failed: {_tls_reason(details)}")

    async def _raise_if_tls_fails(self, code: grpc.StatusCode) -> None:
        """Before a welcome, an UNAVAILABLE may hide a certificate problem under TLS, or a TLS trainer
        dialled without TLS: probe once."""
        if self._welcomed or code != grpc.StatusCode.UNAVAILABLE:
            return
        from robot_agent.tls_probe import speaks_tls, tls_failure

        if self.config.insecure:
            if await asyncio.to_thread(speaks_tls, self.config):
                raise LinkRefused(
                    f"the trainer at {self.config.server} speaks TLS and this agent dials without it "
                    "(--insecure): drop --insecure and pass --tls-ca (and the token or client certificate)"
                )
            return

        reason = await asyncio.to_thread(tls_failure, self.config)
        if reason is not None:
            raise LinkRefused(f"TLS with {self.config.server} failed: {reason}")

    async def _session(self, stop: asyncio.Event) -> None:
        async with make_channel(self.config) as channel:
            session = channel.stream_stream(  # the generated stub, but taking serialised messages too
                SESSION_METHOD,
                request_serializer=_serialize,
                response_deserializer=pb.TrainerMessage.FromString,
            )
            metadata = link_codec.metadata_token(self.config.token) if self.config.token else None
            call = session(metadata=metadata)
            pending = self.spool.pending()
            await self._send(call, pb.AgentMessage(register=self._register(pending)))
            first = await call.read()
            if first is grpc.aio.EOF:
                await self._ended(call)
            if not first.HasField("welcome"):
                raise LinkRefused("the trainer answered the registration with something other than a welcome")
            if first.welcome.protocol_version != link_codec.PROTOCOL_VERSION:
                raise LinkRefused(
                    f"protocol mismatch: trainer speaks v{first.welcome.protocol_version}, "
                    f"agent v{link_codec.PROTOCOL_VERSION}; upgrade the older side"
                )
            self.sessions += 1
            self._welcomed = True
            self.control.use_frame_ring(first.welcome.frame_ring_accepted)
            self.resume_token = first.welcome.resume_token
            log.info(
                "connected to %s as %s (session %s)",
                self.config.server,
                self.robot_id,
                first.welcome.session_id,
            )
            offered = self.control.frame_ring_offer()
            if offered is not None:
                log.info("raw frames %s", "by shared memory (the trainer is on this host)"
                         if first.welcome.frame_ring_accepted else "in-band: the trainer did not map the frame ring")  # fmt: skip
            self._outbox = outbox = asyncio.Queue()
            probing = first.welcome.echoes_probes and self.control.codec.measuring
            early = await self._probe_at_connect(call) if probing else []
            with self._count_lock:
                self._pending_observations = 0
            self.control.link_up()
            for message in early:  # what the trainer sent while the link was being measured
                await self._dispatch(message, outbox)
            tasks = [
                asyncio.create_task(self._write(call, outbox)),
                asyncio.create_task(self._read(call, outbox)),
                asyncio.create_task(stop.wait()),
            ]
            if probing:
                tasks.append(asyncio.create_task(self._probe_now_and_then(outbox)))
            upload = asyncio.create_task(self._upload(pending, outbox))
            try:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
            finally:
                self.control.link_down()
                self.control.use_frame_ring(False)
                for task in (*tasks, upload):
                    task.cancel()
                call.cancel()

    async def _send(self, call, message: Outgoing) -> None:
        """Write one message; a call the trainer has already ended reads as its status, not a crash."""
        try:
            await call.write(message)
        except asyncio.InvalidStateError:  # grpc: "RPC already finished", ended between two writes
            await self._ended(call)

    async def _ended(self, call) -> None:
        """The trainer ended the stream: a refusal, or a link loss whatever its status (OK included)."""
        code, details = await call.code(), await call.details()
        self._raise_if_refused(code, details or "", _retry_after(await call.trailing_metadata()))
        raise LinkLost(f"the trainer ended the session ({code.name}{': ' + details if details else ''})")

    def _register(self, pending: list[str]) -> pb.Register:
        caps = self.control.driver.capabilities
        return pb.Register(
            robot_id=self.robot_id,
            robot_kind=self.robot_kind,
            spec=link_codec.spec_to_proto(self.control.spec),
            agent_version=link_codec.AGENT_VERSION,
            protocol_version=link_codec.PROTOCOL_VERSION,
            capabilities=pb.DriverCapabilities(
                reset=caps.reset,
                reward=caps.reward,
                gripper=caps.gripper,
                action_kinds=[self.control.spec.action.kind],
            ),
            unacked_episode_ids=pending,
            resume_token=self.resume_token,
            frame_ring=self.control.frame_ring_offer(),
        )

    async def _write(self, call, outbox: asyncio.Queue) -> None:
        while True:
            message = await outbox.get()
            if _is_observation(message):
                with self._count_lock:
                    self._pending_observations -= 1
            elif isinstance(message, _Probe):
                self._probes_sent[message.probe_id] = (
                    time.perf_counter()
                )  # timed from the wire, not the queue
            await self._send(call, message)

    async def _read(self, call, outbox: asyncio.Queue) -> None:
        while True:
            message = await call.read()
            if message is grpc.aio.EOF:
                await self._ended(call)
            await self._dispatch(message, outbox)

    async def _dispatch(self, message: pb.TrainerMessage, outbox: asyncio.Queue) -> None:
        try:
            field_limits.check_sizes(message)
        except field_limits.FieldTooLarge as exc:  # a broken or hostile trainer: nothing of it is used
            raise LinkLost(f"the trainer sent an oversized message ({exc})") from None
        body = message.WhichOneof("body")
        if body == "actions":
            self.control.accept_chunk(message.actions)
        elif body == "command":
            self.control.post_command(message.command)
        elif body == "ack":
            await self._on_ack(message.ack, outbox)
        elif body == "probe_echo":
            waiter = self._probe_waiters.pop(message.probe_echo.id, None)
            sent = self._probes_sent.pop(message.probe_echo.id, None)
            if waiter is not None and sent is not None and not waiter.done():
                waiter.set_result((time.perf_counter() - sent) * 1e3)

    # -- measuring the link for link.codec=auto (robot_agent/codec_choice.py) ----------------------
    async def _probe_at_connect(self, call) -> list[pb.TrainerMessage]:
        """Probe pairs before the first observation; returns what else the trainer sent meanwhile."""
        early: list[pb.TrainerMessage] = []
        try:
            await self._probe_inline(call, 0, early)  # warm-up: the stream's first round trips run slow
            for _ in range(PROBE_PAIRS_AT_CONNECT):
                size = self.control.codec.meter.probe_bytes(self._probe_cap())
                small = await self._probe_inline(call, 0, early)
                large = await self._probe_inline(call, size, early)
                self.control.codec.probed(small, large, size)
        except asyncio.TimeoutError:
            log.warning("the trainer did not echo a link probe within %g s: frames stay %s until it does",
                        PROBE_TIMEOUT_S, self.control.codec.choice.labels())  # fmt: skip
        return early

    async def _probe_inline(self, call, size: int, early: list) -> float:
        probe_id = self._next_probe_id()
        message = _probe(probe_id, size)
        started = time.perf_counter()
        await self._send(call, message)
        while True:
            message = await asyncio.wait_for(call.read(), PROBE_TIMEOUT_S)
            if message is grpc.aio.EOF:
                await self._ended(call)
            if message.HasField("probe_echo") and message.probe_echo.id == probe_id:
                return (time.perf_counter() - started) * 1e3
            early.append(message)

    async def _probe_now_and_then(self, outbox: asyncio.Queue) -> None:
        """A probe pair every ``link.probe_interval_s``, about 4 ms of the link at its measured rate."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.probe_interval_s)
            size = self.control.codec.meter.probe_bytes(self._probe_cap())
            times = []
            for padding in (0, size):
                probe_id = self._next_probe_id()
                waiter = self._probe_waiters[probe_id] = loop.create_future()
                outbox.put_nowait(_probe(probe_id, padding))
                try:
                    times.append(await asyncio.wait_for(waiter, PROBE_TIMEOUT_S))
                except asyncio.TimeoutError:
                    self._probe_waiters.pop(probe_id, None)
                    self._probes_sent.pop(probe_id, None)
                    break
            if len(times) == 2:
                self.control.codec.probed(times[0], times[1], size)

    def _probe_cap(self) -> int:
        """A large probe is at most one observation of raw frames (and at most PROBE_MAX_BYTES)."""
        raw = sum(camera.height * camera.width * 3 for camera in self.control.spec.cameras)
        return max(1, min(raw, link_codec.MAX_PROBE_BYTES))

    def _next_probe_id(self) -> int:
        self._probe_id += 1
        return self._probe_id

    async def _on_ack(self, ack: pb.Ack, outbox: asyncio.Queue) -> None:
        if ack.status == pb.Ack.STORED:
            self.spool.acknowledge(ack.episode_id)
        elif ack.status == pb.Ack.INCOMPLETE and ack.episode_id in self.spool.pending():
            task = asyncio.create_task(self._upload([ack.episode_id], outbox))
            self._uploads.add(task)
            task.add_done_callback(self._uploads.discard)

    async def _upload(self, episode_ids: list[str], outbox: asyncio.Queue) -> None:
        """Send spooled episodes again, a part at a time, without starving live observations."""
        for episode_id in episode_ids:
            try:
                for part in self.spool.upload_parts(episode_id, self.config.upload_part_bytes):
                    while outbox.qsize() > 2:
                        await asyncio.sleep(0.005)
                    outbox.put_nowait(pb.AgentMessage(episode_upload=part))
            except FileNotFoundError:
                continue  # acknowledged meanwhile
            log.info("uploaded spooled episode %s", episode_id)
