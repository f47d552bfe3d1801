"""The helper processes a real arm's driver runs its vendor library in, and what they share with it.

Vendor libraries whose blocking calls keep the GIL (pylibfranka; measured in
``franka_process.py``) starve the agent's link when they run in a thread, so each real-time loop
gets a process of its own. The driver and a helper talk through shared memory (a
:class:`SharedBlock` per state or target vector) and a pipe: the helper answers ``("ready",
error)`` once connected, ``("reply", error)`` to each command, and sends ``("fault", text)`` when
the robot stops on its own. A fault is kept until the driver clears it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from robot_agent.drivers.base import DriverError


class SharedBlock:
    """A float64 vector in shared memory behind a seqlock: one writer, readers never see a torn copy."""

    def __init__(self, context: Any, size: int) -> None:
        self.values = context.RawArray("d", size)
        self.version = context.RawValue("q", 0)

    def write(self, data) -> None:
        self.version.value += 1  # odd: a write is in progress
        self.values[:] = data
        self.version.value += 1

    def read(self) -> np.ndarray:
        while True:
            before = self.version.value
            if before % 2 == 0:
                data = np.frombuffer(self.values, dtype=np.float64).copy()
                if self.version.value == before:
                    return data
            time.sleep(0)


class HelperProcesses:
    """A driver's helper processes by name (spawned, so they start clean), their pipes and faults."""

    def __init__(self, robot: str) -> None:
        self.robot = robot  # names the robot in errors: "franka", "ur5e"
        self.context = multiprocessing.get_context("spawn")
        self.processes: list[Any] = []
        self.conns: dict[str, Any] = {}
        self.fault: str | None = None

    @property
    def running(self) -> bool:
        return bool(self.processes)

    def start(self, name: str, main: Callable[..., None], args: tuple, timeout_s: float = 30.0) -> None:
        """Start ``main(*args, conn)`` and wait until it says it is connected (or why not)."""
        ours, theirs = self.context.Pipe()
        process = self.context.Process(
            target=main, args=(*args, theirs), name=f"{self.robot}-{name}", daemon=True
        )
        process.start()
        self.processes.append(process)
        deadline = time.monotonic() + timeout_s
        while not ours.poll(0.1):
            if not process.is_alive() or time.monotonic() > deadline:
                self.close({})
                raise DriverError(
                    f"the {self.robot} {name} process did not start (exit code {process.exitcode}); "
                    "a script that builds the driver needs an `if __name__ == '__main__':` guard"
                )
        _, error = ours.recv()
        if error:
            self.close({})
            raise DriverError(error)
        self.conns[name] = ours

    def has(self, name: str) -> bool:
        return name in self.conns

    def send(self, name: str, message: Any) -> None:
        self.conns[name].send(message)

    def call(self, name: str, *command: Any, timeout: float = 10.0) -> None:
        """Send ``command`` to helper ``name`` and wait for its reply (faults met on the way are kept)."""
        conn = self.conns[name]
        conn.send(command)
        deadline = time.monotonic() + timeout
        while conn.poll(max(0.0, deadline - time.monotonic())):
            kind, message = conn.recv()
            if kind == "fault":
                self.fault = message
                continue
            if message:
                raise DriverError(f"{self.robot} {command[0]} failed: {message}")
            return
        raise DriverError(f"{self.robot} {command[0]}: no reply within {timeout} s")

    def drain_faults(self, log) -> None:
        for conn in self.conns.values():
            while conn.poll():
                kind, message = conn.recv()
                if kind == "fault":
                    self.fault = message
                    log.error("%s: %s", self.robot, message)

    def close(self, goodbyes: dict[str, list[Any]]) -> None:
        """Send each helper its goodbye messages, then join (or kill) every process."""
        for name, messages in goodbyes.items():
            for message in messages:
                if name in self.conns:
                    with contextlib.suppress(OSError):
                        self.conns[name].send(message)
        for process in self.processes:
            process.join(3.0)
            if process.is_alive():
                process.kill()
        self.processes, self.conns = [], {}
