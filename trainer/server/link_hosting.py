"""The robot link as every serve mode hosts it: auth and limits from the config, on its own loop thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from pathlib import Path

from trainer.configs.errors import ConfigError
from trainer.server.admission import transport_limit
from trainer.server.auth import AuthConfigError, ServerAuthConfig, load_robot_tokens
from trainer.server.config import ServeConfig, run_features
from trainer.server.judged_episodes import JudgedEpisodes
from trainer.server.link_server import LinkServer, LinkServerConfig, LinkServerThread, SessionHook
from trainer.server.recorder import LeRobotEpisodeSink
from trainer.server.session import RobotSession

log = logging.getLogger(__name__)


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


def recorded_features(config: ServeConfig) -> dict | None:
    """The features of the dataset already at ``data.record_dir`` (None when it is empty)."""
    import json

    from protos.episode_frames import dataset_features

    info = Path(config.data.record_dir) / "meta" / "info.json"
    return dataset_features(json.loads(info.read_text())) if info.is_file() else None


def link_config(config: ServeConfig, schema: dict | None = None) -> LinkServerConfig:
    """The link server's config; ``schema``, the run's dataset features when known, sizes gRPC's limit."""
    server = config.server
    return LinkServerConfig(
        host=listen_host(server),
        port=server.port,
        # With the schema known, a message bigger than its observations and upload parts allow is
        # refused by gRPC before Python copies it (an 8 MB one costs the shared loop ~20 ms).
        max_message_bytes=transport_limit(schema),
        auth=auth_from(config),
        max_session_bytes=server.max_session_bytes,
        limits=server.link_limits(),
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


class HostedLink:
    """The robot link as every serve mode hosts it: a :class:`LinkServer` on its own event-loop
    thread, recording robot episodes to ``data.record_dir``, with the live view when
    ``server.view=rerun``. The calling thread stays free for the mode's own work (training, DAgger
    rounds, or waiting for Ctrl-C). ``stop_event`` (on the link's loop) ends per-robot work.

    ``on_session(session)`` is a coroutine started for every robot that registers (collect, eval).
    """

    def __init__(
        self,
        config: ServeConfig,
        on_session: SessionHook | None = None,
        mode: str = "",
        judged: JudgedEpisodes | None = None,  # train mode: the reward source's values to record
    ) -> None:
        if config.server.view not in ("", "rerun"):
            raise ConfigError(f"server.view must be '' or 'rerun', got {config.server.view!r}")
        self.config = config
        features = run_features(config.data)
        sink = LeRobotEpisodeSink(config.data.record_dir, config.data.video_format(), judged, features)
        schema = features or recorded_features(config)  # the run's schema: it sizes the link
        if schema is None:
            log.warning("data.features is unset and %s is empty: the first robot to register fixes the "
                        "dataset's cameras and state (set data.features to an env spec or a dataset to "
                        "fix them)", config.data.record_dir)  # fmt: skip
        self.server = LinkServer(link_config(config, schema), sink=sink, on_session=on_session)
        self.thread = LinkServerThread(self.server).start()
        self.loop = self.thread.loop
        self.stop_event = asyncio.Event()  # waited on only on the link's loop; set through stop()
        self._background: list[Future] = []
        log.info("serving robots on %s:%d (mode %s), recording to %s", listen_host(config.server),
                 self.server.port, mode or config.server.mode, config.data.record_dir)  # fmt: skip
        if config.server.view == "rerun":
            from trainer.viewer import LiveView

            self.spawn(LiveView(self.server, config.server.view_save).run(self.stop_event))

    def spawn(self, coroutine: Coroutine) -> Future:
        """Run ``coroutine`` on the link's loop until it returns (it should watch ``stop_event``)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        self._background.append(future)
        return future

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)

    def close(self) -> None:
        """Stop per-robot work and background tasks, then the server; every acknowledged episode is on disk."""
        self.stop()
        for future in self._background:
            with contextlib.suppress(Exception):
                future.result(timeout=30)
        self.thread.stop(grace=2.0)
        self.server.store_executor.shutdown(wait=True)

    def __enter__(self) -> HostedLink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
