"""The robot link as each serve mode hosts it: auth and limits from the config, on its own loop thread."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from trainer.server.auth import AuthConfigError, ServerAuthConfig, load_robot_tokens
from trainer.server.config import ServeConfig
from trainer.server.link_server import LinkServer, LinkServerConfig, LinkServerThread
from trainer.server.recorder import LeRobotEpisodeSink
from trainer.server.session import RobotSession


def auth_from(config: ServeConfig) -> ServerAuthConfig:
    server = config.server
    token = None
    if server.token_file:
        path = Path(server.token_file).expanduser()
        if not path.is_file():
            raise AuthConfigError(f"server.token_file {path} does not exist")
        token = path.read_text().strip()
    return ServerAuthConfig(
        token=token,
        tls_cert=server.tls_cert or None,
        tls_key=server.tls_key or None,
        client_ca=server.client_ca or None,
        insecure=server.insecure,
        robot_tokens=load_robot_tokens(server.robot_tokens_file) if server.robot_tokens_file else {},
    )


def listen_host(server) -> str:
    """``server.host``, or by default every interface with TLS and only loopback when insecure."""
    return server.host or ("127.0.0.1" if server.insecure else "0.0.0.0")


def link_config(config: ServeConfig) -> LinkServerConfig:
    server = config.server
    return LinkServerConfig(
        host=listen_host(server),
        port=server.port,
        auth=auth_from(config),
        max_session_bytes=server.max_session_bytes,
        reflection=server.reflection,
        health_requires_token=server.health_requires_token,
    )


def connected_robots(server: LinkServer) -> list[str]:
    return [robot_id for robot_id, s in server.sessions.items() if s.state != "disconnected"]


def wait_for_robots(
    link: LinkServer,
    count: int,
    timeout_s: float,
    key: str,
    misfit: Callable[[RobotSession], str | None] | None = None,
) -> None:
    """Wait until ``count`` robots are connected (and fit: ``misfit(session)`` is None), or raise
    :class:`TimeoutError` naming how many came and why any did not count."""
    deadline = time.monotonic() + timeout_s
    while True:
        problems = {}
        for robot_id in connected_robots(link):
            problem = misfit(link.sessions[robot_id]) if misfit is not None else None
            if problem:
                problems[robot_id] = problem
        fitting = len(connected_robots(link)) - len(problems)
        if fitting >= count:
            return
        if time.monotonic() > deadline:
            refused = (
                f" ({len(problems)} more did not fit: {next(iter(problems.values()))})" if problems else ""
            )
            raise TimeoutError(
                f"{key}={count}: only {fitting} robots connected after {timeout_s:.0f} s{refused}"
            )
        time.sleep(0.2)


def start_link(config: ServeConfig):
    """The link server on its own loop thread, recording robot episodes to ``data.record_dir``."""
    sink = LeRobotEpisodeSink(config.data.record_dir, config.data.video_format())
    link = LinkServer(link_config(config), sink=sink)
    return link, LinkServerThread(link).start()


def stop_link(link: LinkServer, thread) -> None:
    thread.stop(grace=2.0)
    link.store_executor.shutdown(wait=True)  # every acknowledged episode is on disk
