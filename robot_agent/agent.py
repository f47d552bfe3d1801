"""The agent: a driver, its control loop, the episode spool and the link, wired together."""

from __future__ import annotations

import asyncio
import threading

from robot_agent.config import AgentConfig
from robot_agent.control_loop import ControlLoop
from robot_agent.core_wake import IdleCoreSpinners, IdleStateLimit
from robot_agent.drivers.base import RobotDriver
from robot_agent.link import LinkClient
from robot_agent.spool import EpisodeSpool, spool_folder


class Agent:
    """Runs one robot: the control loop in its own thread, the link on an asyncio loop."""

    def __init__(
        self, driver: RobotDriver, config: AgentConfig, robot_kind: str | None = None, teleop=None
    ) -> None:
        self.driver, self.config = driver, config
        self.spool = EpisodeSpool(spool_folder(config.spool_dir, config.link.server, config.robot_id))
        self.control = ControlLoop(driver, config, self.spool, send=self._send, teleop=teleop)
        self.link = LinkClient(
            config.link, self.control, self.spool, config.robot_id, robot_kind or driver.kind
        )

    def _send(self, message) -> None:
        self.link.send(message)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Serve until ``stop`` is set (or the trainer refuses us); the robot holds whenever the link is down."""
        stop = stop or asyncio.Event()
        awake, spinners = IdleStateLimit(), IdleCoreSpinners()
        if self.config.keep_cores_awake:
            awake.hold()
        if self.config.spin_idle_cores:
            spinners.hold()
        self.control.start()
        try:
            await self.link.run(stop)
        finally:
            self.control.stop()
            self.spool.close()
            awake.release()
            spinners.release()


class AgentThread:
    """An :class:`Agent` on a background thread with its own event loop (tests, benchmarks, notebooks)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.error: BaseException | None = None
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"agent-{agent.config.robot_id}", daemon=True)

    def start(self) -> AgentThread:
        self._thread.start()
        self._ready.wait(5.0)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self._stop = asyncio.Event()
            self._ready.set()
            await self.agent.run(self._stop)

        try:
            self._loop.run_until_complete(main())
        except BaseException as exc:  # surfaced to the test / caller through .error
            self.error = exc
        finally:
            self._ready.set()
            self._loop.close()
