"""Real trainer link servers and real agents (sim-twin driver) on loopback, for integration tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from robot_agent.agent import Agent, AgentThread
from robot_agent.config import AgentConfig, LinkConfig
from robot_agent.drivers import make_driver
from robot_agent.safety import SafetyConfig
from trainer.server.auth import ServerAuthConfig
from trainer.server.link_server import LinkServer, LinkServerConfig, LinkServerThread

TWIN = {"task": "reach", "control_hz": 20.0, "cameras": ["front", "wrist"], "image_size": 64}


def start_server(auth: ServerAuthConfig | None = None, port: int = 0) -> LinkServerThread:
    config = LinkServerConfig(host="127.0.0.1", port=port, auth=auth or ServerAuthConfig(insecure=True))
    return LinkServerThread(LinkServer(config)).start()


def start_agent(
    port: int,
    spool: Path,
    robot_id: str = "twin-0",
    driver: dict[str, Any] | None = None,
    safety: SafetyConfig | None = None,
    teleop=None,
    **link: Any,
) -> AgentThread:
    link.setdefault("insecure", not link.get("tls_ca"))
    link.setdefault("reconnect_initial_s", 0.05)
    link.setdefault("reconnect_max_s", 0.5)
    config = AgentConfig(
        robot_id=robot_id,
        spool_dir=str(spool),
        safety=safety or SafetyConfig(),
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
