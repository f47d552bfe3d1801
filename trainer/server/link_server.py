"""The trainer's side of the robot link: a grpc asyncio server that accepts many robot agents at once.

Each agent opens one ``Session`` stream. The server checks the token, reads the registration (the
robot's :class:`EnvSpec` travels in it), admits it (:mod:`trainer.server.admission`: identity, the
memory budget, the dataset's features) and then keeps a :class:`RobotSession` that the rest of the
trainer uses to read observations and send actions and commands. Every message is checked against
the spec as it arrives; a bad one ends that robot's stream with a status naming the field, and
never touches another robot. Episodes are stored once each through an :class:`EpisodeSink`, on a
pool of threads, while the robot's stream reads on (its next episode must not wait for a video
encode); one robot's stores run in order, each acknowledged once written, and a robot with
``STORES_IN_FLIGHT`` stores pending is not read until one is done (back-pressure on that robot alone).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from protos import field_limits, frame_ring, link_codec
from protos import robot_link_pb2 as pb
from protos import robot_link_pb2_grpc as pb_grpc
from trainer.server import admission, wire_sizes
from trainer.server.auth import ServerAuthConfig, TokenGate
from trainer.server.episodes import EpisodeAssembler, EpisodeSink, MemoryEpisodeSink, StoreCall
from trainer.server.link_budgets import (
    LinkLimits,
    LogBudget,
    Penalties,
    RateBudget,
    SessionCounter,
    clip_text,
)
from trainer.server.memory import freeze_startup_heap, return_freed_memory, tune_allocator
from trainer.server.session import ObservationListener, RobotSession

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["RobotLink"].full_name
STORE_THREADS = 4
# Episode stores (decoding, mp4 encoding, writing) run niced, so that at an episode's end they yield
# the CPU to the live robots' observations and actions rather than make them miss their ticks.
STORE_NICE = 10
HEALTH_PREFIX = "/grpc.health.v1.Health/"
REFLECTION_PREFIX = "/grpc.reflection."
REGISTRATION_LIMITS = {"register": wire_sizes.REGISTER_BYTES}
GONE_ROBOTS_KEPT = 64
LARGE_MESSAGE_BYTES = (
    1 << 20
)  # after a refused or last message this large, memory is handed back at once  # disconnected robots whose sessions stay listed (server.sessions)


def lower_thread_priority(nice: int) -> None:
    """Run the calling thread, and the threads it starts (an encoder's), at least ``nice``. On Linux
    nice is per thread; elsewhere this does nothing."""
    try:
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, max(nice, os.getpriority(os.PRIO_PROCESS, thread)))
    except (AttributeError, OSError):
        pass


@dataclass(frozen=True)
class LinkServerConfig:
    """Where the server listens and how it authenticates agents."""

    host: str = "0.0.0.0"
    port: int = 50051
    auth: ServerAuthConfig = field(default_factory=lambda: ServerAuthConfig(insecure=True))
    max_message_bytes: int = link_codec.MAX_MESSAGE_BYTES
    max_session_bytes: int = 4 << 30  # refuse robots whose spec could make their session hold more
    reflection: bool = False  # gRPC server reflection (lists the services; asks for the token)
    health_requires_token: bool = False  # False: load balancers and probes may ask without one
    frame_ring: bool = True  # map the raw-frame ring of an agent on this host (protos/frame_ring.py)
    limits: LinkLimits = field(default_factory=LinkLimits)  # sessions, rates and log lines per peer


SessionHook = Callable[[RobotSession], Awaitable[None] | None]


class LinkServer:
    """Owns the grpc server and the live sessions, keyed by robot id."""

    def __init__(
        self,
        config: LinkServerConfig,
        sink: EpisodeSink | None = None,
        on_session: SessionHook | None = None,
    ) -> None:
        self.config = config
        self.sink = sink if sink is not None else MemoryEpisodeSink()
        self.on_session = on_session
        self.sessions: dict[str, RobotSession] = {}
        # Called on the event loop with (session, observation) for every observation of every robot.
        self.observation_listeners: list[ObservationListener] = []
        self.assemblers: dict[str, EpisodeAssembler] = {}
        self.refused = 0
        self.store_failure: str | None = None  # set when an episode could not be stored: no more are taken
        self.counter = SessionCounter(config.limits)
        self.penalties = Penalties(config.limits)
        # Refusals come before a session exists: their log lines share one budget.
        self.refusal_log = LogBudget(log, config.limits.log_lines_burst, config.limits.log_lines_per_s)
        # Robots connecting and leaving: a lab's worth is always logged, a flood of sessions is not.
        self.session_log = LogBudget(log, 100, 2.0)
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self._session_added = asyncio.Condition()
        self._tasks: set[asyncio.Task] = set()
        # Episodes are stored (decoded, encoded, written) off the event loop and off the robot's
        # stream; one robot's in order, several robots' at once.
        self.store_executor = ThreadPoolExecutor(
            STORE_THREADS,
            thread_name_prefix="episode-store",
            initializer=lower_thread_priority,
            initargs=(STORE_NICE,),
        )
        self._stores: dict[str, collections.deque[asyncio.Task]] = {}  # robot id -> its pending stores

    async def start(self) -> int:
        """Bind and start serving; returns the bound port (useful with ``port=0``)."""
        limit = self.config.max_message_bytes
        limits = self.config.limits
        tune_allocator()
        freeze_startup_heap()
        gated = (HEALTH_PREFIX,) if self.config.health_requires_token else ()
        self._server = grpc.aio.server(
            interceptors=[TokenGate(self.config.auth, (*gated, REFLECTION_PREFIX))],
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                ("grpc.keepalive_time_ms", 2000),
                ("grpc.keepalive_timeout_ms", 2000),
                ("grpc.http2.min_ping_interval_without_data_ms", 1000),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.so_reuseport", 0),
                # A connection that never finishes TLS / HTTP/2 (a raw socket left open) is closed.
                ("grpc.server_handshake_timeout_ms", int(limits.handshake_timeout_s * 1000)),
                ("grpc.max_concurrent_streams", limits.max_concurrent_streams),
            ],
        )
        # The robot link takes each message as bytes, to weigh it before it is parsed (wire_sizes.py).
        handlers = {
            "Session": grpc.stream_stream_rpc_method_handler(
                _Servicer(self).Session,
                request_deserializer=None,
                response_serializer=pb.TrainerMessage.SerializeToString,
            )
        }
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
        health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health, self._server)
        if self.config.reflection:
            reflection.enable_server_reflection(
                (SERVICE_NAME, "grpc.health.v1.Health", reflection.SERVICE_NAME), self._server
            )
        address = f"{self.config.host}:{self.config.port}"
        credentials = self.config.auth.credentials()
        try:
            if credentials is None:
                self.port = self._server.add_insecure_port(address)
            else:
                self.port = self._server.add_secure_port(address, credentials)
        except RuntimeError:  # grpc's "Failed to bind" (newer grpcio raises instead of returning 0)
            self.port = 0
        if self.port == 0:
            raise OSError(
                f"could not bind the robot link to {address}: in use by another process (an earlier "
                f"serve still running? `ss -ltnp | grep :{self.config.port}` names it); stop it, or pick "
                "another server.port and give the agents that port in --server"
            )
        await self._server.start()
        await health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        await health.set("", health_pb2.HealthCheckResponse.SERVING)
        log.info("robot link listening on %s:%d", self.config.host, self.port)
        return self.port

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving. ``grace=None`` drops every stream at once, as a crash would."""
        if self._server is not None:
            await self._server.stop(grace)
        for session in list(self.sessions.values()):
            await session.close()
        pending = [task for tasks in self._stores.values() for task in tasks]
        if grace is not None and pending:  # a graceful stop writes the episodes that have ended
            log.info("waiting for %d episode write(s) to finish before the link stops", len(pending))
            await asyncio.wait(pending)

    async def store_behind(self, session: RobotSession, store: StoreCall) -> None:
        """Run ``store`` (it writes one episode) on a store thread after this robot's earlier stores,
        then send its ack; returns once it is queued, waiting first while the robot has
        ``STORES_IN_FLIGHT`` pending. A store that fails ends the robot's stream."""
        pending = self._stores.setdefault(session.robot_id, collections.deque())
        while len(pending) >= admission.STORES_IN_FLIGHT:
            await asyncio.wait([pending[0]])
        task = asyncio.ensure_future(self._store_after(pending[-1] if pending else None, session, store))
        pending.append(task)
        task.add_done_callback(pending.remove)

    async def _store_after(
        self, previous: asyncio.Task | None, session: RobotSession, store: StoreCall
    ) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        try:
            ack = await asyncio.get_running_loop().run_in_executor(self.store_executor, store)
        except (link_codec.LinkCodecError, ValueError) as exc:
            log.warning("robot %s sent a bad episode: %s", session.robot_id, exc)
            session.close_status = (grpc.StatusCode.INVALID_ARGUMENT, f"robot {session.robot_id!r}: {exc}")
            await session.close()
            return
        except Exception as exc:
            # The trainer's own fault (a full disk, a folder it may not write): it takes no more
            # episodes, and says so once, to every robot, rather than have each upload again and again.
            if self.store_failure is None:
                log.exception("robot %s: storing an episode failed", session.robot_id)
                self.store_failure = (
                    f"the trainer cannot store episodes ({type(exc).__name__}: {exc}); they stay in this "
                    "robot's spool: fix data.record_dir on the trainer and restart serve"
                )
            for live in [session, *self.sessions.values()]:  # this robot first; each refused once
                if live.state != "disconnected":
                    await live.refuse(self.store_failure)
            return
        if ack is None:
            return
        if ack.status == pb.Ack.STORED:
            session.stats.episodes_stored += 1
        if session.state != "disconnected":
            session.send_raw(pb.TrainerMessage(ack=ack))

    async def wait_for_robot(self, robot_id: str | None = None, timeout: float | None = None) -> RobotSession:
        """The live session of ``robot_id`` (or of any robot), waiting until one registers."""

        def find() -> RobotSession | None:
            for session in self.sessions.values():
                if session.state != "disconnected" and robot_id in (None, session.robot_id):
                    return session
            return None

        async with self._session_added:
            await asyncio.wait_for(self._session_added.wait_for(lambda: find() is not None), timeout)
        session = find()
        assert session is not None
        return session

    # -- session bookkeeping (called by the servicer) ----------------------------------------------
    def map_frame_ring(self, session: RobotSession, register: pb.Register, peer: str) -> bool:
        """Map the agent's frame ring when it offers one from this host and its layout fits the spec."""
        if not register.HasField("frame_ring") or not self.config.frame_ring:
            return False
        offer = register.frame_ring
        expected = frame_ring.slot_bytes_for([c.shape for c in session.spec.cameras])
        if not frame_ring.peer_is_local(peer) or offer.slot_bytes != expected:
            self.session_log.info("robot %s: frame ring not mapped (%s)", session.robot_id,
                     "the agent is on another host" if not frame_ring.peer_is_local(peer)
                     else f"{offer.slot_bytes}-byte slots, the spec's frames need {expected}")  # fmt: skip
            return False
        try:
            session.frame_ring = frame_ring.FrameRingReader(offer.path, offer.slots, offer.slot_bytes)
        except frame_ring.FrameRingError as exc:
            self.session_log.info("robot %s: frame ring not mapped: %s", session.robot_id, exc)
            return False
        self.session_log.info(
            "robot %s: raw frames by shared memory (%d slots)", session.robot_id, offer.slots
        )
        return True

    def admit(
        self, register: pb.Register, spec, token: str | None, certificate_names: list[str], peer: str
    ) -> admission.Refusal | None:
        """Why this registration may not open a session, or None (see :mod:`trainer.server.admission`)."""
        auth = self.config.auth
        if self.store_failure is not None:  # every episode would be lost; the agents keep theirs spooled
            return admission.Refusal(grpc.StatusCode.FAILED_PRECONDITION, self.store_failure)
        key = field_limits.robot_id_key(register.robot_id)
        twin = next(
            (s for i, s in self.sessions.items() if s.state != "disconnected" and i != register.robot_id
             and field_limits.robot_id_key(i) == key),
            None,
        )  # fmt: skip
        if twin is not None:
            return admission.Refusal(
                grpc.StatusCode.ALREADY_EXISTS,
                f"robot id {register.robot_id!r} differs only in case from the connected {twin.robot_id!r}; "
                "robot ids are unique regardless of case",
            )
        live = self.sessions.get(register.robot_id)
        live_token = live.resume_token if live is not None and live.state != "disconnected" else None
        others = [s.spec for s in self.sessions.values() if s.state != "disconnected" and s is not live]
        mismatch = self.sink.features_mismatch(spec, others)
        return (
            admission.check_identity(
                register.robot_id, token, certificate_names, auth.robot_tokens, bool(auth.client_ca)
            )
            or admission.check_takeover(live_token, register.resume_token, register.robot_id, peer)
            or admission.check_budget(spec, self.config.max_session_bytes)
            or (
                admission.Refusal(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"robot {register.robot_id!r} does not fit the dataset being recorded: {mismatch}",
                )
                if mismatch
                else None
            )
        )

    def _forget_gone_robots(self) -> None:
        """Keep the newest ``GONE_ROBOTS_KEPT`` disconnected robots (for the console and reports) and
        forget older ones: robots that connect once and leave cannot grow what every loop walks."""
        gone = [robot_id for robot_id, s in self.sessions.items() if s.state == "disconnected"]
        for robot_id in gone[: max(len(gone) - GONE_ROBOTS_KEPT, 0)]:
            if not self._stores.get(robot_id):
                del self.sessions[robot_id]
                self.assemblers.pop(robot_id, None)
                self._stores.pop(robot_id, None)

    async def _open(self, register: pb.Register, spec) -> RobotSession:
        old = self.sessions.get(register.robot_id)
        if old is not None and old.state != "disconnected":
            log.warning("robot %s reconnected: its old session is replaced", register.robot_id)
            await old.close()
        session = RobotSession(register, spec, self.observation_listeners, self.config.limits)
        self.sessions[register.robot_id] = session
        self._forget_gone_robots()
        caps = register.capabilities
        self.session_log.info("robot %s (%s) registered: %s; reset %s, reward %s, gripper %s; %d spooled "
                 "episodes to upload", register.robot_id, register.robot_kind, spec.name, caps.reset, caps.reward, caps.gripper,
                 len(register.unacked_episode_ids))  # fmt: skip
        assembler = self.assemblers.get(register.robot_id)
        if assembler is None or assembler.spec != spec:
            self.assemblers[register.robot_id] = EpisodeAssembler(register.robot_id, spec, self.sink)
        async with self._session_added:
            self._session_added.notify_all()
        if self.on_session is not None:
            result = self.on_session(session)
            if asyncio.iscoroutine(result):
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        return session


class _Servicer(pb_grpc.RobotLinkServicer):
    def __init__(self, server: LinkServer) -> None:
        self.server = server

    async def Session(self, request_iterator, context: grpc.aio.ServicerContext):  # noqa: N802 (the rpc's name)
        server = self.server
        metadata = dict(context.invocation_metadata() or ())
        token = link_codec.token_from_metadata(metadata)
        if not server.config.auth.token_ok(token):
            self._refuse(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                "wrong or missing token: start the agent with --token-file holding this trainer's token",
            )
            return
        credential, host = _credential(token, context), _peer_host(context.peer())
        key = f"{credential}@{host}"
        delay = server.penalties.delay_s(key)
        if delay > 0:  # recent sessions from here were refused or sent bad messages: wait, unread
            await asyncio.sleep(delay)
        over = server.counter.try_open(credential, host)
        if over is not None:
            server.penalties.charge(key, 0)
            self._refuse(
                context, grpc.StatusCode.RESOURCE_EXHAUSTED, over, server.config.limits.busy_retry_after_s
            )
            return
        try:
            async for message in self._serve(request_iterator, context, token, key):
                yield message
        finally:
            server.counter.close(credential, host)

    async def _serve(self, request_iterator, context, token: str | None, key: str):
        server = self.server
        received = [0]  # bytes of the newest message read (what a refusal charges to ``key``)
        register, refusal = await self._registration(request_iterator, received)
        spec = None
        if refusal is None:
            try:
                spec = link_codec.spec_from_proto(register.spec)
            except link_codec.LinkCodecError as exc:
                refusal = admission.Refusal(
                    grpc.StatusCode.INVALID_ARGUMENT, f"robot {register.robot_id!r}: {exc}"
                )
        if refusal is None:
            refusal = server.admit(register, spec, token, _certificate_names(context), context.peer())
        if refusal is not None:
            # The call ends with a status, not an exception: an abort's exception stays with the call's
            # state, and its traceback holds grpc's reader, which holds the last message read (a
            # refused 20 MB registration stayed in memory until a garbage collection).
            del register
            await _release(request_iterator, received[0])
            server.penalties.charge(key, received[0])
            self._refuse(context, refusal.code, refusal.message)
            return
        register.spec.Clear()  # built into `spec`: the parsed copy is not needed
        session = await server._open(register, spec)
        ring_accepted = server.map_frame_ring(session, register, context.peer())
        reader = asyncio.create_task(self._read(request_iterator, session, received))
        try:
            yield pb.TrainerMessage(
                welcome=pb.Welcome(
                    session_id=session.session_id,
                    protocol_version=link_codec.PROTOCOL_VERSION,
                    trainer_version=link_codec.AGENT_VERSION,
                    resume_token=session.resume_token,
                    frame_ring_accepted=ring_accepted,
                    echoes_probes=True,
                )
            )
            while True:
                message = await session.outbox.get()
                if message is None:
                    break
                size = message.ByteSize()
                if size > server.config.max_message_bytes:
                    # End the stream with a status the agent reads, rather than let grpc fail the send.
                    # (The "call left open" once blamed on context.abort() here was the agent dying on
                    # a write to the ended call; robot_agent/link.py now reads that as a link loss.)
                    log.error("robot %s: a %d-byte message exceeds the link limit", session.robot_id, size)
                    context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
                    context.set_details(
                        f"trainer message of {size} bytes exceeds the link limit of {server.config.max_message_bytes}"
                    )
                    return
                yield message
            if session.close_status is not None:  # the agent sent something wrong: tell it what
                code, details = session.close_status
                server.penalties.charge(key, received[0])
                context.set_code(code)
                context.set_details(details)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            await _release(request_iterator, received[0])
            if server.sessions.get(session.robot_id) is session:
                await session.close()
            assembler = server.assemblers.get(session.robot_id)
            if assembler is not None:
                assembler.forget_partial()
            server.session_log.info("robot %s disconnected", session.robot_id)

    async def _registration(
        self, request_iterator, received: list[int]
    ) -> tuple[pb.Register | None, admission.Refusal | None]:
        """The first message, if it is a valid registration, or why not (checked before any use)."""
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        try:
            first = await asyncio.wait_for(
                anext(aiter(request_iterator)), self.server.config.limits.register_timeout_s
            )
        except asyncio.TimeoutError:
            return None, admission.Refusal(
                invalid, f"no registration within {self.server.config.limits.register_timeout_s:g} s"
            )
        except StopAsyncIteration:
            return None, admission.Refusal(invalid, "the first message must be a registration")
        except grpc.aio.AioRpcError:
            raise
        except Exception as exc:  # an undecodable message: grpc raises from its deserializer
            return None, admission.Refusal(invalid, f"unreadable first message ({str(exc)[:200]})")
        received[0] = len(first)
        try:
            if set(wire_sizes.body_sizes(first)) != {"register"}:
                return None, admission.Refusal(invalid, "the first message must be a registration")
            wire_sizes.check_body_sizes(first, REGISTRATION_LIMITS)
            first = pb.AgentMessage.FromString(first)
            field_limits.check_sizes(first)
        except (wire_sizes.WireSizeError, field_limits.FieldTooLarge) as exc:
            return None, admission.Refusal(invalid, f"registration refused: {exc}")
        except DecodeError as exc:
            return None, admission.Refusal(invalid, f"unreadable first message ({str(exc)[:200]})")
        if not first.HasField("register"):
            return None, admission.Refusal(invalid, "the first message must be a registration")
        register = first.register
        if register.protocol_version != link_codec.PROTOCOL_VERSION:
            return None, admission.Refusal(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"agent speaks protocol v{register.protocol_version}, trainer v{link_codec.PROTOCOL_VERSION}",
            )
        problem = field_limits.robot_id_problem(register.robot_id)
        if problem is not None:
            return None, admission.Refusal(invalid, f"registration refused: {problem}")
        return register, None

    def _refuse(
        self, context, code: grpc.StatusCode, message: str, retry_after_s: float | None = None
    ) -> None:
        """Set the call's final status (the caller returns); ``retry_after_s``: the refusal may pass
        later, and the agent retries then."""
        self.server.refused += 1
        self.server.refusal_log.warning("refused an agent from %s: %s", context.peer(), message)
        if retry_after_s is not None:
            context.set_trailing_metadata(((link_codec.RETRY_AFTER_KEY, f"{retry_after_s:g}"),))
        context.set_code(code)
        context.set_details(message)

    async def _read(self, request_iterator, session: RobotSession, received: list[int]) -> None:
        assembler = self.server.assemblers[session.robot_id]
        budget = RateBudget(*session.rates, self.server.config.limits.burst_s)
        limits = wire_sizes.session_limits(session.observation_bytes, self.server.config.max_message_bytes)
        try:
            async for data in request_iterator:
                if session.state == "disconnected":
                    break
                received[0] = len(data)
                # Weighed, then parsed, then every field sized: each failure is a ValueError that
                # ends this robot's stream, and an oversized message is never parsed.
                wire_sizes.check_body_sizes(data, limits)
                message = _parse(data)
                field_limits.check_sizes(message)
                await self._dispatch(message, session, assembler)
                wait = budget.charge(len(data))
                if wait > 0:  # over its rates: not read (so not parsed) until back within them
                    session.stats.throttled_s += wait
                    session.log.warning("robot %s is over its link budget (%.0f messages/s, %.1f MB/s): "
                                        "reading it %.2f s later", session.robot_id, budget.messages_per_s,
                                        budget.bytes_per_s / 2**20, wait)  # fmt: skip
                    await asyncio.sleep(wait)
        except (grpc.aio.AioRpcError, grpc.aio.AbortError, asyncio.CancelledError):
            pass  # the stream ended, or the writer side aborted it
        except (link_codec.LinkCodecError, ValueError) as exc:  # this robot's stream ends, no other
            # Sessions that end on a bad message share one log budget (an attacker reconnects each time).
            self.server.refusal_log.warning(
                "robot %s sent a bad message: %s", session.robot_id, str(exc)[:300]
            )
            session.close_status = (grpc.StatusCode.INVALID_ARGUMENT, f"robot {session.robot_id!r}: {exc}")
        except Exception as exc:
            log.exception("robot %s: unexpected failure reading its stream", session.robot_id)
            session.close_status = (grpc.StatusCode.INTERNAL, f"trainer failed on a message: {exc}")
        finally:
            await session.close()

    async def _dispatch(
        self, message: pb.AgentMessage, session: RobotSession, assembler: EpisodeAssembler
    ) -> Any:
        body = message.WhichOneof("body")
        if body == "observation":
            observation = frame_ring.materialize(message.observation, session.frame_ring)
            if observation is None:
                session.stats.ring_overruns += 1  # the trainer fell a ring behind: this tick is lost
                if session.stats.ring_overruns in (1, 10, 100, 1000):
                    log.warning("robot %s: %d observations lost to frame-ring overruns (the trainer is "
                                "behind; raise link.frame_ring_slots)", session.robot_id, session.stats.ring_overruns)  # fmt: skip
                return None
            link_codec.check_observation(observation, session.spec)
            if session.latest is not None and observation.seq <= session.latest.seq:
                raise link_codec.LinkCodecError(
                    f"observation seq {observation.seq} is not after the last one ({session.latest.seq})"
                )
            assembler.on_observation(observation)
            await session.on_observation(observation)
        elif body == "episode_event":
            event = message.episode_event
            session.events.put_nowait(event)
            if event.kind in (pb.EpisodeEvent.ENDED, pb.EpisodeEvent.ABORTED):
                await self.server.store_behind(session, assembler.end(event))
        elif body == "episode_upload":
            for observation in message.episode_upload.observations:
                link_codec.check_observation(observation, session.spec)
            store = assembler.upload(message.episode_upload)
            if store is not None:
                await self.server.store_behind(session, store)
        elif body == "probe":
            session.echo_probe(message.probe)
        elif body == "error":
            session.stats.errors += 1
            session.stats.last_error = f"{message.error.code}: {message.error.message}"[:500]
            session.log.warning("robot %s: %s", session.robot_id, clip_text(session.stats.last_error))
        else:
            raise ValueError(f"unexpected message {body!r} after registration")


def _parse(data: bytes) -> pb.AgentMessage:
    try:
        return pb.AgentMessage.FromString(data)
    except DecodeError as exc:
        raise link_codec.LinkCodecError(f"unreadable message ({str(exc)[:200]})") from None


async def _release(request_iterator, last_message_bytes: int) -> None:
    """Let go of the last message read. grpc's reader (an async generator) holds it while suspended,
    and the reader sits in a reference cycle of grpc's call state that lives until a full garbage
    collection: closing the generator frees the message now (a refused 20 MB registration stayed)."""
    reader = aiter(request_iterator)
    if hasattr(reader, "aclose"):
        with contextlib.suppress(Exception):
            await reader.aclose()
    if last_message_bytes > LARGE_MESSAGE_BYTES:  # a big block was freed: hand its pages back now
        return_freed_memory()


def _credential(token: str | None, context) -> str:
    """What a session counts against: its client certificate's name, else its token (hashed), else none."""
    names = _certificate_names(context)
    if names:
        return "cert:" + ",".join(sorted(names))
    if token:
        return "token:" + hashlib.sha256(token.encode()).hexdigest()[:16]
    return "anonymous"


def _peer_host(peer: str) -> str:
    """``ipv4:10.0.0.5:51234`` -> ``ipv4:10.0.0.5`` (sessions are counted per host, not per connection)."""
    kind, _, address = peer.partition(":")
    if kind == "ipv6" and address.startswith("["):
        return f"{kind}:{address.partition(']')[0]}]"
    return f"{kind}:{address.rpartition(':')[0]}" if kind in ("ipv4", "ipv6") else kind


def _certificate_names(context) -> list[str]:
    """The client certificate's common name(s), under mutual TLS; empty otherwise."""
    auth = context.auth_context() or {}
    return [name.decode() for name in auth.get("x509_common_name", [])]


class LinkServerThread:
    """A :class:`LinkServer` on its own event loop thread; ``call`` runs a coroutine there (tests, benchmarks)."""

    def __init__(self, server: LinkServer) -> None:
        self.server = server
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="link-server", daemon=True)

    def start(self) -> LinkServerThread:
        self._thread.start()
        self.call(self.server.start())
        return self

    call_timeout_s = 30.0  # how long ``call`` waits, unless told otherwise

    def call(self, coro, timeout: float | None = None):
        wait = self.call_timeout_s if timeout is None else timeout
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(wait)

    def stop(self, grace: float | None = None) -> None:
        """Stop the server; a graceful stop returns once every ended episode is written, however
        long its store takes (a video encode of a long episode can take minutes)."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self.server.stop(grace), self.loop).result()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
