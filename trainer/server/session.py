"""One connected robot as the trainer sees it: its spec, its newest observation, and a way to talk to it."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc
import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import EnvSpec
from protos.frame_ring import FrameRingReader
from trainer.server.admission import RECENT_OBSERVATIONS, session_budget
from trainer.server.link_budgets import LinkLimits, LogBudget, clip_text

log = logging.getLogger(__name__)
STATES = ("streaming", "holding", "disconnected")
CLOCK_WARN_S = 1.0  # a robot PC's wall clock this far from the trainer's: its logs will not line up
PROBES_AT_ONCE, PROBES_PER_S = 16, 4.0  # link probes an agent may send (a burst, then a rate)
MAX_SAFETY_EVENT_KINDS = 64  # distinct safety-event strings counted per session; the rest as "other"


class RobotUnavailable(ConnectionError):
    """The robot's session closed (link dropped, agent stopped or replaced)."""


@dataclass
class SessionStats:
    observations: int = 0
    chunks_sent: int = 0
    errors: int = 0
    episodes_stored: int = 0
    last_error: str = ""
    arrival_s: deque = field(default_factory=lambda: deque(maxlen=64))  # server clock, for the rate
    reply_ms: deque = field(default_factory=lambda: deque(maxlen=256))  # observation in -> chunk out
    reply_ms_all: deque = field(default_factory=lambda: deque(maxlen=100_000))
    # capture -> send on the agent, from the frame's capture_mono_ns and the observation's mono_ns
    # (one clock, the agent's): how old the frames are when they leave the robot.
    frame_age_ms: deque = field(default_factory=lambda: deque(maxlen=256))
    safety_events: Counter = field(default_factory=Counter)  # e.g. "clipped:workspace" -> count
    policy_version: int = 0  # of the chunk behind the newest executed policy action (agent's echo)
    clock_offset_s: float = 0.0  # trainer wall clock minus the agent's, at the first observation
    ring_overruns: int = 0  # observations lost because the agent reused their frame-ring slot
    probes: int = 0  # link probes echoed (link.codec=auto measures the link with them)
    codec_reason: str = ""  # the agent's newest word on how it encodes its frames, and why
    frames: str = ""  # how the newest observation's frames came, e.g. "jpeg q75" or "raw, ring"
    throttled_s: float = 0.0  # how long the link held this robot back for going over its rates

    def rate_hz(self) -> float:
        if len(self.arrival_s) < 2:
            return 0.0
        span = self.arrival_s[-1] - self.arrival_s[0]
        return (len(self.arrival_s) - 1) / span if span > 0 else 0.0


def frames_label(frames) -> str:
    """How frames came, in a few characters: "jpeg q75", "jpeg q50 1/2" (sent at half of each side),
    "raw", "ring" (several when cameras differ)."""
    labels = []
    for frame in frames:
        if frame.codec == pb.CODEC_JPEG:
            label = f"jpeg q{frame.jpeg_quality}" if frame.jpeg_quality else "jpeg"
        else:
            label = "ring" if frame.codec == pb.CODEC_RING else "raw"
        if frame.downscale > 1:
            label += f" 1/{frame.downscale}"
        if label not in labels:
            labels.append(label)
    return ", ".join(labels)


ObservationListener = Callable[["RobotSession", pb.Observation], None]


class RobotSession:
    """Lives on the server's event loop. ``send_*`` queue messages; ``next_observation`` waits for one."""

    def __init__(
        self,
        register: pb.Register,
        spec: EnvSpec,
        listeners: Sequence[ObservationListener] = (),
        limits: LinkLimits | None = None,
    ) -> None:
        self.robot_id = register.robot_id
        self.robot_kind = register.robot_kind
        self.capabilities = register.capabilities
        self.spec = spec
        self.session_id = uuid.uuid4().hex[:12]
        self.resume_token = secrets.token_urlsafe(24)  # only this agent learns it (in its Welcome)
        self.state = "streaming"
        self.close_status: tuple | None = None  # (grpc status, message) when the agent sent something wrong
        self.stats = SessionStats()
        self.outbox: asyncio.Queue[pb.TrainerMessage | None] = asyncio.Queue()
        self.latest: pb.Observation | None = None
        # Every step of a chunk, not just the newest (bounded: it counts in the session's memory budget).
        self.recent: deque[pb.Observation] = deque(maxlen=RECENT_OBSERVATIONS)
        self.events: asyncio.Queue[pb.EpisodeEvent] = asyncio.Queue()
        self._new_observation = asyncio.Condition()
        self._received_at: dict[int, float] = {}
        # (obs_seq, chunk) of the newest answers, to record what the policy said on ticks a human drove.
        self._answers: deque[tuple[int, np.ndarray]] = deque(maxlen=64)
        self._listeners = listeners  # the server's list: a listener added later hears this robot too
        self.frame_ring: FrameRingReader | None = None  # an agent on this host: raw frames by shm
        self.opened_at = time.monotonic()
        # (messages/s, bytes/s) this robot may send, and what it may make the trainer log.
        limits = limits or LinkLimits()
        self.observation_bytes = session_budget(spec).observation_bytes  # the largest its spec allows
        self.rates = limits.session_rates(spec.control_hz, self.observation_bytes)
        self.log = LogBudget(log, limits.log_lines_burst, limits.log_lines_per_s)

    # -- incoming ------------------------------------------------------------------------------------
    async def on_observation(self, obs: pb.Observation) -> None:
        now = time.monotonic()
        self.stats.observations += 1
        if self.stats.observations == 1 and obs.wall_ns:
            self._check_clock(obs.wall_ns)
        for frame in obs.frames:
            if frame.capture_mono_ns and obs.mono_ns >= frame.capture_mono_ns:
                self.stats.frame_age_ms.append((obs.mono_ns - frame.capture_mono_ns) / 1e6)
        self._count_safety_events(obs.transition.safety_events)
        self._note_codec(obs)
        if obs.transition.policy_action:
            self.stats.policy_version = obs.transition.policy_version
        self.stats.arrival_s.append(now)
        self._received_at[obs.seq] = now
        if len(self._received_at) > 512:
            for seq in sorted(self._received_at)[:256]:
                del self._received_at[seq]
        self.state = "holding" if obs.holding else "streaming"
        self._complete_policy_action(obs)
        async with self._new_observation:
            self.latest = obs
            self.recent.append(obs)
            self._new_observation.notify_all()
        for listener in self._listeners:
            listener(self, obs)

    def _count_safety_events(self, events) -> None:
        counts = self.stats.safety_events
        for event in events:
            if event in counts or len(counts) < MAX_SAFETY_EVENT_KINDS:
                counts[event] += 1
            else:
                counts["other"] += 1

    def _note_codec(self, obs: pb.Observation) -> None:
        if obs.codec_reason:
            self.stats.codec_reason = obs.codec_reason
            self.log.info("robot %s frames: %s", self.robot_id, clip_text(obs.codec_reason))
        self.stats.frames = frames_label(obs.frames) + (" (shm ring)" if self.frame_ring is not None else "")

    def _check_clock(self, agent_wall_ns: int) -> None:
        offset = time.time() - agent_wall_ns / 1e9  # includes the link's one-way delay (ms)
        self.stats.clock_offset_s = offset
        if abs(offset) > CLOCK_WARN_S:
            log.warning(
                "robot %s: its clock is %.1f s %s the trainer's; sync it (NTP/chrony) so logs line up",
                self.robot_id, abs(offset), "behind" if offset > 0 else "ahead of",
            )  # fmt: skip

    def _complete_policy_action(self, obs: pb.Observation) -> None:
        """Fill in the policy's action of a tick the human drove before the answer reached the agent.

        The transition in ``obs`` came from the tick that sent the previous observation; what this
        trainer answered to it is what the policy would have done, however late it arrived there.
        """
        transition, previous = obs.transition, self.latest
        if not (obs.HasField("transition") and transition.intervened and not transition.policy_action):
            return
        if previous is None or previous.episode_id != obs.episode_id or previous.step != obs.step - 1:
            return  # the executing tick's observation was not seen (skipped on a slow link)
        for first_seq, chunk in reversed(self._answers):
            if first_seq <= previous.seq < first_seq + len(chunk):
                transition.policy_action[:] = chunk[previous.seq - first_seq].tolist()
                return

    async def next_observation(self, after_seq: int = -1, timeout: float | None = None) -> pb.Observation:
        """The first observation with ``seq > after_seq``; raises :class:`RobotUnavailable` if the robot left."""

        def ready() -> bool:
            return self.state == "disconnected" or (self.latest is not None and self.latest.seq > after_seq)

        async with self._new_observation:
            await asyncio.wait_for(self._new_observation.wait_for(ready), timeout)
            if self.state == "disconnected":
                raise RobotUnavailable(f"robot {self.robot_id!r} disconnected")
            assert self.latest is not None
            return self.latest

    async def observations_after(self, after_seq: int, timeout: float | None = None) -> list[pb.Observation]:
        """Every buffered observation with ``seq > after_seq``, oldest first (waits for at least one)."""
        await self.next_observation(after_seq, timeout)
        return [obs for obs in self.recent if obs.seq > after_seq]

    async def refuse(self, reason: str) -> None:
        """End the session telling the agent why this trainer will not drive it (a spec that does not
        fit): the agent prints the reason and stops, as reconnecting the same robot cannot help."""
        self.close_status = (grpc.StatusCode.FAILED_PRECONDITION, reason)
        await self.close()

    async def close(self) -> None:
        """End the session and free what it buffered (the newest observation stays, for inspection)."""
        self.state = "disconnected"
        if self.frame_ring is not None:
            self.frame_ring.close()
            self.frame_ring = None
        self.recent.clear()
        self._answers.clear()
        self._received_at.clear()
        self.outbox.put_nowait(None)
        async with self._new_observation:
            self._new_observation.notify_all()

    # -- outgoing ------------------------------------------------------------------------------------
    def send_actions(
        self, actions: np.ndarray, obs_seq: int, max_age_ms: int = 0, policy_version: int = 0
    ) -> None:
        self._ensure_open()
        received = self._received_at.get(obs_seq)
        if received is not None:
            reply_ms = (time.monotonic() - received) * 1000
            self.stats.reply_ms.append(reply_ms)
            self.stats.reply_ms_all.append(reply_ms)
        self.stats.chunks_sent += 1
        chunk = link_codec.chunk_to_proto(actions, obs_seq, max_age_ms, policy_version)
        self._answers.append((obs_seq, link_codec.chunk_from_proto(chunk)))
        self.outbox.put_nowait(pb.TrainerMessage(actions=chunk))

    def echo_probe(self, probe: pb.LinkProbe) -> None:
        """Answer a link probe at once (the agent times it); too many or too large ends the stream."""
        self.stats.probes += 1
        allowed = PROBES_AT_ONCE + PROBES_PER_S * (time.monotonic() - self.opened_at)
        if len(probe.padding) > link_codec.MAX_PROBE_BYTES or self.stats.probes > allowed:
            raise link_codec.LinkCodecError(
                f"link probe {probe.id} of {len(probe.padding)} bytes: probes are at most "
                f"{link_codec.MAX_PROBE_BYTES} bytes, {PROBES_PER_S:g} a second"
            )
        self.send_raw(pb.TrainerMessage(probe_echo=pb.LinkProbe(id=probe.id)))

    def send_command(self, kind: int, **fields) -> None:
        self._ensure_open()
        self.outbox.put_nowait(pb.TrainerMessage(command=pb.Command(kind=kind, **fields)))

    def send_raw(self, message: pb.TrainerMessage) -> None:
        self._ensure_open()
        self.outbox.put_nowait(message)

    def _ensure_open(self) -> None:
        if self.state == "disconnected":
            raise RobotUnavailable(f"robot {self.robot_id!r} disconnected")
