"""``rlinf-robot teleop``: a human drives the robot with no trainer; episodes go to a local dataset.

The same :class:`~robot_agent.control_loop.ControlLoop` as ``connect`` runs the robot, in teleop
mode, with its safety filter and spool; only the link is replaced by this session, which starts
episodes and moves each finished one from the spool into a LeRobot v3 dataset. An episode ends when
the operator labels it (success / failure), when the task ends it, or at the spec's horizon. With a
device a person holds (keyboard, spacemouse), each episode starts only when the operator asks
(``start``), so they can reset the scene first; the robot holds meanwhile. Scripted and replayed
devices run episodes back to back.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from protos import robot_link_pb2 as pb
from robot_agent.config import AgentConfig
from robot_agent.control_loop import ControlLoop
from robot_agent.drivers.base import RobotDriver
from robot_agent.recording import LocalDataset
from robot_agent.spool import EpisodeSpool
from robot_agent.teleop import TeleopLost

log = logging.getLogger(__name__)


@dataclass
class TeleopEpisode:
    """What one recorded episode was, for the operator's console."""

    number: int
    episode_id: str
    steps: int
    success: bool
    aborted: bool
    reason: str


class TeleopSession:
    """Runs ``episodes`` teleoperated episodes (0: until stopped) and records each one locally."""

    def __init__(
        self,
        driver: RobotDriver,
        config: AgentConfig,
        spool: EpisodeSpool,
        dataset: LocalDataset,
        teleop,
        episodes: int = 0,
        seed: int = 0,
        on_episode: Callable[[TeleopEpisode], None] | None = None,
        wait_for_start: bool | None = None,  # None: as the device says (``waits_for_start``)
        on_waiting: Callable[[int], None] | None = None,  # told the number of the episode it waits for
    ) -> None:
        self.config, self.spool, self.dataset = config, spool, dataset
        self.episodes, self.seed, self.on_episode = episodes, seed, on_episode
        self.teleop, self.on_waiting = teleop, on_waiting
        self.wait_for_start = teleop.waits_for_start if wait_for_start is None else wait_for_start
        self._events: queue.Queue[pb.EpisodeEvent] = queue.Queue()
        self.errors: list[pb.AgentError] = []
        self.control = ControlLoop(driver, config, spool, send=self._receive, teleop=teleop)
        self.recorded: list[TeleopEpisode] = []

    def _receive(self, message: pb.AgentMessage | bytes) -> None:  # the control loop's thread
        if isinstance(message, bytes):
            return  # an observation with raw frames, serialised: the spool has it
        kind = message.WhichOneof("body")
        if kind == "episode_event" and message.episode_event.kind != pb.EpisodeEvent.STARTED:
            self._events.put(message.episode_event)
        elif kind == "error":
            self.errors.append(message.error)
            log.error("agent error %s: %s", message.error.code, message.error.message)

    def run(self, stop: threading.Event | None = None) -> list[TeleopEpisode]:
        stop = stop or threading.Event()
        recovered = self.dataset.drain()
        if recovered:
            log.info("recorded %d episode(s) left in the spool by an earlier run", recovered)
        self.control.post_command(pb.Command(kind=pb.Command.SET_MODE, mode=pb.MODE_TELEOP))
        self.control.link_up()  # no link: the session itself is the only "trainer"
        self.control.start()
        try:
            number = 0
            while not stop.is_set() and (self.episodes == 0 or number < self.episodes):
                if self.wait_for_start and not self._operator_starts(number + 1, stop):
                    break
                self.control.post_command(pb.Command(kind=pb.Command.START_EPISODE, seed=self.seed + number))
                end = self._wait_end(stop)
                if end is None:
                    break
                number += 1
                self._record(number, end)
                if self.control.estopped:
                    log.critical("e-stop latched: teleop session ends")
                    break
        finally:
            self.control.stop()
            end = self._drain_events()
            if end is not None:  # the episode the stop cut short
                self._record(len(self.recorded) + 1, end)
            self.dataset.drain()
            self.spool.close()
        return self.recorded

    def _operator_starts(self, number: int, stop: threading.Event) -> bool:
        """Poll the device until the operator starts episode ``number``; False if stopped or lost.

        Between episodes the control loop does not poll the device (it only does during an episode),
        so this thread may."""
        if self.on_waiting is not None:
            self.on_waiting(number)
        while not stop.is_set():
            try:
                if self.teleop.poll().start:
                    return True
            except TeleopLost as exc:
                log.error("teleop device lost while waiting to start episode %d: %s", number, exc)
                return False
            if not self.control.alive():
                raise RuntimeError("the control loop stopped unexpectedly (see the log above)")
            time.sleep(self.control.period_s)
        return False

    def _wait_end(self, stop: threading.Event) -> pb.EpisodeEvent | None:
        while not stop.is_set():
            try:
                return self._events.get(timeout=0.1)
            except queue.Empty:
                if not self.control.alive():
                    raise RuntimeError("the control loop stopped unexpectedly (see the log above)") from None
        return None

    def _drain_events(self) -> pb.EpisodeEvent | None:
        end = None
        while not self._events.empty():
            end = self._events.get_nowait()
        return end

    def _record(self, number: int, end: pb.EpisodeEvent) -> None:
        self.dataset.store(end.episode_id)
        episode = TeleopEpisode(
            number=number,
            episode_id=end.episode_id,
            steps=end.num_steps,
            success=end.success,
            aborted=end.kind == pb.EpisodeEvent.ABORTED,
            reason=end.reason,
        )
        self.recorded.append(episode)
        if self.on_episode is not None:
            self.on_episode(episode)
