"""``rlinf-trainer serve``: accept robot agents, drive their episodes, record everything.

One entry per mode: ``collect`` (:mod:`trainer.server.collect`), ``eval``
(:mod:`trainer.server.robot_eval`), ``dagger`` (:mod:`trainer.server.dagger`) and ``train`` (the
runner on an env pool of sims + robots). Every mode hosts the link the same way
(:class:`~trainer.server.link_hosting.HostedLink`: the server on its own loop thread) and does its
own work in this thread. Every robot episode lands in the LeRobot v3 dataset at ``data.record_dir``;
in collect and eval a live table on the console and TensorBoard under ``log_dir`` show each
robot's rate, reply latency and episode count (train and dagger show their own progress instead).
"""

from __future__ import annotations

import logging
import signal
import threading

from trainer.server.collect import collect, episode_seeds
from trainer.server.config import ServeConfig
from trainer.server.console import Console
from trainer.server.link_hosting import HostedLink
from trainer.server.link_server import LinkServer
from trainer.server.robot_eval import Evaluation
from trainer.stop_signals import exit_code

log = logging.getLogger(__name__)


def serve(config: ServeConfig, stop: threading.Event, on_started=None) -> LinkServer:
    """``collect`` or ``eval`` until ``stop`` is set; returns the (stopped) server.
    ``on_started(server)`` once it listens."""
    hosted: HostedLink
    evaluation = None
    if config.server.mode == "eval":
        evaluation = Evaluation.from_config(config, on_finished=stop.set)  # eval.robots done: exit
        on_session = lambda session: evaluation.run(session, hosted.stop_event)  # noqa: E731
    else:
        seeds = episode_seeds(config)
        on_session = lambda session: collect(session, config, hosted.stop_event, seeds)  # noqa: E731
    with HostedLink(config, on_session) as hosted:
        if evaluation is not None and config.openpi.port:  # robots that speak openpi's protocol too
            hosted.spawn(openpi_server(config, evaluation).run(hosted.stop_event))
        if evaluation is not None and config.lerobot.port:  # and LeRobot's async-inference protocol
            hosted.spawn(lerobot_server(config, evaluation).run(hosted.stop_event))
        if on_started is not None:
            on_started(hosted.server)
        hosted.spawn(Console(hosted.server, config.log_dir).run(hosted.stop_event))
        while not stop.wait(0.5):
            pass
    if evaluation is not None:
        for line in evaluation.summary():
            print(line, flush=True)
    return hosted.server


def openpi_server(config: ServeConfig, evaluation: Evaluation):
    """The openpi websocket server for ``eval`` mode's policy (``openpi.*``), sharing its inference thread."""
    from trainer.server.link_hosting import auth_from, listen_host
    from trainer.server.openpi_server import OpenpiMapping, OpenpiPolicyServer

    mapping = OpenpiMapping(dict(config.openpi.images), config.openpi.state, config.openpi.prompt)
    return OpenpiPolicyServer(
        evaluation.driver, mapping, auth_from(config), listen_host(config.server), config.openpi.port,
        max_connections=config.server.max_sessions, metadata={"policy": evaluation.policy_path},
    )  # fmt: skip


def lerobot_server(config: ServeConfig, evaluation: Evaluation):
    """The LeRobot async-inference server for ``eval`` mode's policy (``lerobot.*``)."""
    import ipaddress

    from trainer.server.lerobot_server import LerobotMapping, LerobotPolicyServer

    section = config.lerobot
    loopback_only = all(ipaddress.ip_network(p, strict=False).is_loopback for p in section.allowed_peers)
    host = config.server.host or ("127.0.0.1" if loopback_only else "0.0.0.0")
    return LerobotPolicyServer(
        evaluation.driver, LerobotMapping(dict(section.images), section.similar_state_atol), host, section.port,
        allowed_peers=list(section.allowed_peers), max_clients=config.server.max_sessions,
        obs_queue_timeout_s=section.obs_queue_timeout_s,
    )  # fmt: skip


def main(config: ServeConfig) -> int:
    if config.server.mode == "dagger":
        from trainer.server.dagger import dagger

        try:
            rows = dagger(config)
        except KeyboardInterrupt as interrupt:
            return exit_code(interrupt)
        log.info("dagger done: %d rounds", len(rows))
        return 0
    if config.server.mode == "train":
        from trainer.server.train_mode import train

        try:
            progress = train(config)
        except KeyboardInterrupt as interrupt:
            return exit_code(interrupt)
        log.info("training done: %d iterations, %d env steps", progress.iteration, progress.env_steps)
        return 0

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    serve(config, stop)
    return 0
