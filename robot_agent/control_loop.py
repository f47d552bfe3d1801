"""The agent's control loop: one tick per control period, on the agent's own clock, in its own thread.

Each tick:
1. apply queued commands (start / stop episode, hold, e-stop, mode);
2. observe the robot and send the observation (seq = tick number);
3. wait, at most part of the period, for the action of this tick (a chunk answering any earlier seq);
4. pass it through local safety and execute it, or hold if there is none;
5. sleep to the next tick.

The link thread only calls :meth:`accept_chunk`, :meth:`post_command`, :meth:`link_up` and
:meth:`link_down`; everything that touches the robot happens here.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import EnvSpec, with_max_downscale, with_previous_action
from robot_agent.action_queue import ActionQueue
from robot_agent.chunk_intake import ChunkIntake
from robot_agent.codec_choice import ChoiceRule, CodecSelector
from robot_agent.config import AgentConfig
from robot_agent.drivers.base import DriverError, RobotDriver
from robot_agent.frame_encoder import FrameEncoder
from robot_agent.safety import SafetyFilter, UnusableState
from robot_agent.spool import EpisodeSpool
from robot_agent.teleop_arbiter import TeleopArbiter
from robot_agent.tick_ledger import TickLedger
from robot_agent.watchdog import Watchdog

log = logging.getLogger(__name__)

Send = Callable[[pb.AgentMessage | bytes], None]  # bytes: a serialised observation message


@dataclass
class LoopStats:
    """Counters the agent logs and tests read."""

    ticks: int = 0
    actions_executed: int = 0
    holds: int = 0
    missed_ticks: int = 0  # ticks inside an episode that had no valid action (the robot held)
    chunks_accepted: int = 0
    chunks_rejected: int = 0
    late_ticks: int = 0
    intervened_ticks: int = 0  # ticks where a human's action replaced the policy's
    episodes_ended: int = 0
    episodes_aborted: int = 0
    # Observation sent -> its chunk received (accepted or too late), on the agent clock (encode +
    # link + trainer + link).
    round_trip_ms: collections.deque = field(default_factory=lambda: collections.deque(maxlen=100_000))
    encode_ms: collections.deque = field(default_factory=lambda: collections.deque(maxlen=100_000))
    # Each entry into hold: (monotonic time, reason, the watchdog deadline in force at that moment).
    holds_entered: list[tuple[float, str, float]] = field(default_factory=list)


@dataclass
class _Episode:
    episode_id: str
    step: int = 0
    pending: pb.Observation | None = None  # newest observation of the current step
    transition: pb.Transition | None = None
    ending: tuple[int, str] | None = None  # (EpisodeEvent kind, reason) once the last step has run
    success: bool = False
    label: str | None = None  # the operator's "success" / "failure": this tick's step is the last


def spec_sent(driver_spec: EnvSpec, config: AgentConfig) -> EnvSpec:
    """The spec the trainer is told and episodes are recorded under: the driver's, with the link's
    smaller frames allowed and, if configured, the previous action in the state."""
    spec = with_max_downscale(driver_spec, config.link.max_downscale)
    return with_previous_action(spec) if config.previous_action_in_state else spec


class ControlLoop:
    """Runs the robot; safe to start before the link is up (it holds until actions arrive).

    Owns the driver once started: every driver call, ``close`` included, happens on the loop's thread.
    """

    def __init__(
        self, driver: RobotDriver, config: AgentConfig, spool: EpisodeSpool, send: Send, teleop=None
    ) -> None:
        self.driver, self.config, self.spool, self._send = driver, config, spool, send
        # A human device (robot_agent.teleop): it takes over from the policy while its reading says so.
        if teleop is not None:
            teleop.bind(driver)
        self.teleop = TeleopArbiter(teleop, driver.spec, on_hand_back=self._policy_resumes)
        self.spec = spec_sent(driver.spec, config)  # what the trainer is told
        self.period_s = 1.0 / self.spec.control_hz
        # The agent's limits, the workspace box from the driver's own arm where [safety] sets none.
        self.limits = config.safety.for_embodiment(driver.embodiment, f"driver {driver.kind!r}")
        self.safety = SafetyFilter(self.spec, driver.arms, self.limits)
        driver.set_safety_limits(self.limits)
        self.queue = ActionQueue(config.chunk_merge)
        self.watchdog = Watchdog(self.limits.watchdog_periods * self.period_s)
        self.stats = LoopStats()
        self.mode = pb.MODE_POLICY
        self.holding = True
        self.estopped = False
        self._link_up = threading.Event()
        self.link_lost_at: float | None = None  # monotonic time of the last link loss
        self._stop = threading.Event()
        self._wake = threading.Event()  # ends the sleep between ticks early (link loss, stop)
        self._commands: collections.deque[pb.Command] = collections.deque()
        self.ledger = TickLedger()  # the tick being run (observations and actions are indexed by it)
        self._episode: _Episode | None = None
        self._last_executed: np.ndarray | None = None  # after the safety filter (its gripper-rate limit)
        # Before the safety filter: what the policy (or the human) chose, the state's previous action.
        self._last_chosen: np.ndarray | None = None
        link = config.link
        self.codec = CodecSelector(  # the link thread feeds it measurements (link.codec=auto)
            link.codec, self.spec.camera_names, link.jpeg_quality, link.min_jpeg_quality,
            ChoiceRule(self.period_s * 1e3, link.max_link_share),
            {camera.name: camera.max_downscale for camera in self.spec.cameras},
        )  # fmt: skip
        self._encoder = FrameEncoder(len(self.spec.cameras), self.codec)
        self._encoder.offer_ring(self.spec, config.link.server, config.link.frame_ring_slots)
        self._thread: threading.Thread | None = None
        self._driver_error: str | None = None
        self._advice: np.ndarray | None = None  # an expert's label for this tick while the policy drives
        self._unspooled: tuple[str, pb.Observation, dict] | None = None  # raw frames sent, not yet spooled
        self.intake = ChunkIntake(
            self.safety, self.limits, self.queue, self.ledger, self.stats, self._send_error
        )

    # -- called from the link thread ---------------------------------------------------------------
    def accept_chunk(self, msg: pb.ActionChunk) -> str | None:
        """Queue a chunk if it is valid and fresh; returns an error message for the trainer otherwise."""
        return self.intake.accept(msg, self.estopped)

    def post_command(self, command: pb.Command) -> None:
        if command.kind == pb.Command.ESTOP:
            self._estop()  # at once, not at the next tick
        self._commands.append(command)

    def link_up(self) -> None:
        self.codec.announce_again()  # the trainer learns how frames come, on the session's first one
        self._link_up.set()

    def link_down(self) -> None:
        """Hold now and abort the running episode: no action from a dead link is ever executed.

        The control thread is woken to hold at once, not at its next tick."""
        if self._link_up.is_set():
            self.link_lost_at = time.monotonic()
        self._link_up.clear()
        self.queue.clear()
        self._wake.set()

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="control-loop", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._encoder.close()

    def run(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            tick_start = time.monotonic()
            try:
                self._tick(tick_start)
                self._driver_error = None
            except DriverError as exc:
                if str(exc) != self._driver_error:  # report each distinct failure once, not every tick
                    self._driver_error = str(exc)
                    log.error("driver error: %s; holding", exc)
                    self._send_error("driver_error", str(exc))
                self._end_episode(pb.EpisodeEvent.ABORTED, f"driver error: {exc}")
                self._enter_hold("driver error")
            self.stats.ticks += 1
            self.ledger.advance()
            next_tick += self.period_s
            if next_tick > time.monotonic():
                self._sleep_until(next_tick)
            else:
                self.stats.late_ticks += 1
                next_tick = time.monotonic()  # do not try to catch up with a burst of ticks
        self._end_episode(pb.EpisodeEvent.ABORTED, "agent stopped")
        self.driver.close()  # in this thread: drivers may hold thread-bound resources (GL contexts)

    def _sleep_until(self, wake_at: float) -> None:
        """Sleep to the next tick, but hold the moment the link drops or the watchdog's deadline passes."""
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= wake_at:
                return
            until = wake_at
            if self._episode is not None and not self.holding:
                until = min(until, self.watchdog.deadline())
            self._wake.wait(max(0.0, until - now))
            self._wake.clear()
            self._hold_if_unsafe()

    def _hold_if_unsafe(self) -> None:
        if self.holding or self.estopped:
            return
        reason = None
        if not self._link_up.is_set():
            reason = "link down"
        elif self._episode is not None and self.watchdog.expired():
            reason = "watchdog"
        if reason is not None:
            try:
                self.driver.hold()
            except DriverError as exc:
                log.error("driver error while holding: %s", exc)
            self.stats.holds += 1
            self._enter_hold(reason)

    # -- one tick ----------------------------------------------------------------------------------
    def _tick(self, tick_start: float) -> None:
        try:
            self._run_tick(tick_start)
        finally:
            self._spool_sent_frames(answered_by=tick_start + self.config.action_wait_fraction * self.period_s)

    def _run_tick(self, tick_start: float) -> None:
        self._hold_if_unsafe()  # before observing, which may take a while (cameras)
        while self._commands:
            self._apply_command(self._commands.popleft())
        if not self._link_up.is_set() and self._episode is not None:
            self._end_episode(pb.EpisodeEvent.ABORTED, "link lost")
        if not self._link_up.is_set():
            self._enter_hold("link down")
        observation = self._observe()
        episode = self._episode
        if episode is not None and episode.ending is not None:
            self._end_episode(*episode.ending)
            episode = None
        human = self._poll_teleop(episode)
        if human is False:  # the device vanished while a human was driving: hold, never drift
            self.driver.hold()
            self.stats.holds += 1
            return
        if human is not None and episode is not None and not self.estopped:
            # Record what the policy would have done (HG-DAgger compares them): wait for it as a
            # policy tick would; the human's action runs either way, at the same point of the tick.
            budget = tick_start + self.config.action_wait_fraction * self.period_s - time.monotonic()
            policy_action = self.queue.wait_for(
                self.ledger.tick, budget if self.mode != pb.MODE_TELEOP else 0.0
            )
            self._execute(human, observation, episode, policy_action=policy_action, intervened=True)
            return
        action = None
        if episode is not None and self.mode != pb.MODE_TELEOP and not self.estopped:
            wait_until = tick_start + self.config.action_wait_fraction * self.period_s
            deadline = self.watchdog.deadline()
            if time.monotonic() < deadline:
                wait_until = min(wait_until, deadline)  # wake at the deadline to hold on time
            action = self.queue.wait_for(self.ledger.tick, wait_until - time.monotonic())
        else:
            self.queue.wait_for(self.ledger.tick, 0.0)  # drop anything queued for this tick
        if action is None:
            if not self.estopped:
                self.driver.hold()
            self.stats.holds += 1
            if episode is not None:
                self.stats.missed_ticks += 1
            if not self._link_up.is_set():
                self._enter_hold("link down")
            elif episode is not None and self.watchdog.expired():
                self._enter_hold("watchdog")
            return
        self._execute(action, observation, episode)

    def _poll_teleop(self, episode: _Episode | None):
        """The human's action this tick, None when the policy drives, False when the device was lost
        while the human drove (the episode is aborted and the robot held)."""
        self._advice = None
        if episode is None:
            return None  # polled once per episode tick, so a replayed trace lines up with the steps
        tick = self.teleop.poll(self.mode == pb.MODE_TELEOP)
        if tick.lost_while_driving:
            self._enter_hold("teleop device lost")
            self._end_episode(pb.EpisodeEvent.ABORTED, "teleop device lost while the human was driving")
            return False
        if tick.label is not None:
            episode.success = episode.success or tick.label == "success"
            episode.label = tick.label
            episode.ending = (pb.EpisodeEvent.ENDED, f"labelled {tick.label} by the operator")
        self._advice = tick.advice
        return tick.action

    def _policy_resumes(self) -> None:
        """The human handed back: the policy restarts from a chunk answering the current pose."""
        self.queue.clear()
        self.watchdog.feed()

    def _execute(
        self, action: np.ndarray, observation: pb.Observation, episode: _Episode,
        policy_action: np.ndarray | None = None, intervened: bool = False,
    ) -> None:  # fmt: skip
        try:
            safe, events = self.safety.limit(
                action, np.asarray(observation.state), self._last_executed, self.driver.tcp_targets()
            )
        except UnusableState as exc:  # held and the episode aborted, as for any driver fault
            raise DriverError(f"unsafe robot state: {exc}") from None
        outcome = self.driver.apply(safe)
        self.watchdog.feed()
        self.holding = False
        self._last_executed = safe
        self._last_chosen = np.array(action, np.float32)  # a copy: a chunk buffer may be reused
        self.stats.actions_executed += 1
        episode.step += 1
        # An operator's label makes this step the last, and says so in its transition: success ends
        # the task (terminated), failure cuts the episode short (truncated). The trainer then sees
        # the end with the step, and a human reward source pays on it.
        labelled_success, labelled_failure = episode.label == "success", episode.label == "failure"
        episode.success = episode.success or outcome.success or labelled_success
        human_list = []
        if intervened:  # ``action`` is the human's; keep the policy's (if it sent one) beside it
            self.stats.intervened_ticks += 1
            policy_list = [] if policy_action is None else np.asarray(policy_action).tolist()
            human_list = action.tolist()
        else:
            policy_list = action.tolist()
            if self._advice is not None:  # the expert's label of this state (DAgger), not executed
                human_list = self._advice.tolist()
        episode.transition = pb.Transition(
            executed_action=safe.tolist(),
            policy_action=policy_list,
            intervened=intervened,
            human_action=human_list,
            reward=outcome.reward,
            terminated=outcome.terminated or labelled_success,
            truncated=outcome.truncated or episode.step >= self.spec.max_episode_steps or labelled_failure,
            success=outcome.success or labelled_success,
            safety_events=events,
            policy_version=self.intake.policy_version if policy_list else 0,
        )
        if intervened and policy_action is None:
            self.ledger.await_policy(episode.transition)
        if episode.label is None and (outcome.terminated or episode.transition.truncated):
            reason = "terminated" if outcome.terminated else "truncated"
            episode.ending = (pb.EpisodeEvent.ENDED, reason)

    def _observe(self) -> pb.Observation:
        reading = self.driver.observe()
        mono, wall = link_codec.now_ns()
        seq = self.ledger.tick
        frames, raw_pixels = self._encoder.encode(reading.images, reading.capture_ns, seq)
        self.stats.encode_ms.append((time.monotonic_ns() - mono) / 1e6)
        episode = self._episode
        by_ring = any(f.codec == pb.CODEC_RING for f in frames)
        msg = pb.Observation(
            seq=seq,
            episode_id=episode.episode_id if episode else "",
            step=episode.step if episode else 0,
            mono_ns=mono,
            wall_ns=wall,
            frames=frames,
            state=self._state(reading.state).tolist(),
            instruction=reading.instruction or self.spec.instruction,
            mode=self.mode,
            holding=self.holding,
            codec_reason=self.codec.take_announcement() if self._link_up.is_set() else "",
        )
        if episode is not None and episode.transition is not None:
            self.ledger.attach(msg, episode.transition)  # a later answer is no longer recorded
        raw = by_ring or bool(raw_pixels)  # raw frames, whose pixels are not in the message
        if episode is not None:
            episode.pending = msg
            if not raw:
                self.spool.append(episode.episode_id, msg)  # on disk before it is sent: a crash keeps it
        self.ledger.sent(seq, mono)
        if raw_pixels:  # the pixels go into the sent bytes once, never into a message
            self._send(link_codec.observation_message_bytes(msg, raw_pixels))
        else:
            self._send(pb.AgentMessage(observation=msg))
        if episode is not None and raw:
            # Raw frames (by the ring, or in-band) are spooled with their pixels at the end of this
            # tick, once the trainer has answered, off the round trip (a megabyte or two per
            # observation; a crash in between loses one step of an episode it aborts anyway).
            self._unspooled = (episode.episode_id, msg, reading.images if by_ring else raw_pixels)
        return msg

    def _state(self, measured: np.ndarray) -> np.ndarray:
        """The driver's state, and the action last chosen (before the safety filter, as the sim's
        ``previous_action_in_state`` appends it) if the trainer is told so."""
        state = np.asarray(measured, dtype=np.float32)
        if not self.config.previous_action_in_state:
            return state
        if self._last_chosen is None:  # an episode's first tick: no action yet
            return np.concatenate([state, np.zeros(self.driver.spec.action.dim, np.float32)])
        return np.concatenate([state, self._last_chosen])

    def _spool_sent_frames(self, answered_by: float | None = None) -> None:
        """Write the observation whose raw frames were sent (before the next observation, or the end).

        With ``answered_by`` (a monotonic time), first wait until the trainer's answer to it arrives
        or that time passes: a tick whose action was already queued (a chunk plays several ticks)
        would otherwise write a megabyte or two to disk while the link thread sends the same frames,
        and the two threads' turns at the GIL and the CPU added about 1.5 ms to the round trip."""
        if self._unspooled is None:
            return
        episode_id, msg, images = self._unspooled
        self._unspooled = None
        if answered_by is not None:
            self.queue.wait_answered(msg.seq, answered_by - time.monotonic())
        self.spool.append_with_pixels(episode_id, msg, images)

    # -- the frame ring (raw frames to a trainer on this host) -------------------------------------
    def frame_ring_offer(self) -> pb.FrameRing | None:
        return self._encoder.ring_proto()

    def use_frame_ring(self, accepted: bool) -> None:
        """Called by the link: the trainer mapped the ring (True) or the session ended (False)."""
        self._encoder.ring_active = accepted and self._encoder.ring is not None
        self.codec.use_ring(self._encoder.ring_active)

    # -- commands, episodes, hold ------------------------------------------------------------------
    def _apply_command(self, command: pb.Command) -> None:
        kind = command.kind
        if kind == pb.Command.START_EPISODE:
            self._start_episode(command)
        elif kind == pb.Command.STOP_EPISODE:
            if command.reason:  # the trainer gave up on the episode: a fault, never a success
                self._end_episode(pb.EpisodeEvent.ABORTED, f"trainer: {command.reason}")
            else:
                self._end_episode(pb.EpisodeEvent.ENDED, "stopped by the trainer")
        elif kind == pb.Command.HOLD:
            self.queue.clear()
            self._enter_hold("hold command")
        elif kind == pb.Command.SET_MODE:
            self.mode = command.mode
        elif kind == pb.Command.SHUTDOWN:
            self._end_episode(pb.EpisodeEvent.ABORTED, "shutdown by the trainer")
            self._stop.set()
        elif kind == pb.Command.ESTOP:
            self.driver.estop()
            self._end_episode(pb.EpisodeEvent.ABORTED, "e-stop")

    def _start_episode(self, command: pb.Command) -> None:
        if self.estopped:
            self._send_error("estop", "cannot start an episode: e-stop is latched")
            return
        self._end_episode(pb.EpisodeEvent.ENDED, "a new episode was started")
        self.queue.clear()
        self.driver.reset(int(command.seed) if command.seed else None)
        self.safety.begin_episode()
        episode_id = command.episode_id or f"{self.config.robot_id}-{uuid.uuid4().hex[:12]}"
        try:
            self.spool.begin(episode_id)
        except ValueError as exc:
            self._send_error("bad_command", str(exc))
            return
        self._episode = _Episode(episode_id)
        self._last_executed = self._last_chosen = None
        self.ledger.stop_waiting()
        self.teleop.start_episode()
        self.watchdog.feed()
        self._send(
            pb.AgentMessage(
                episode_event=pb.EpisodeEvent(kind=pb.EpisodeEvent.STARTED, episode_id=episode_id)
            )
        )

    def _end_episode(self, kind: int, reason: str) -> None:
        episode = self._episode
        if episode is None:
            return
        num_steps = episode.step
        if episode.pending is None or episode.pending.step != episode.step:
            # The last action ran after the newest observation: observe its outcome now, as its own tick.
            try:
                self._observe()
                self.ledger.advance()
            except DriverError:
                num_steps -= 1  # the outcome of the last action is unknown: drop that transition
        self._episode = None
        end = pb.EpisodeEvent(
            kind=kind,
            episode_id=episode.episode_id,
            num_steps=max(num_steps, 0),
            success=episode.success and kind != pb.EpisodeEvent.ABORTED,  # a fault is never a success
            reason=reason,
        )
        self._spool_sent_frames()
        self.spool.finish(episode.episode_id, end)
        if kind == pb.EpisodeEvent.ABORTED:
            self.stats.episodes_aborted += 1
        else:
            self.stats.episodes_ended += 1
        self._send(pb.AgentMessage(episode_event=end))

    def _enter_hold(self, reason: str) -> None:
        if self.holding:
            return
        self.holding = True
        self.stats.holds_entered.append((time.monotonic(), reason, self.watchdog.deadline()))
        log.warning("holding the robot (%s)", reason)

    def _estop(self) -> None:
        if not self.estopped:
            self.estopped = True
            self.queue.clear()
            log.critical("E-STOP: actions are refused until the agent is restarted")
            self._enter_hold("e-stop")

    def _send_error(self, code: str, message: str) -> None:
        self._send(pb.AgentMessage(error=pb.AgentError(code=code, message=message)))
