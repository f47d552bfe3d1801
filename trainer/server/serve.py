"""``rlinf-trainer serve``: accept robot agents, drive their episodes, record everything.

In ``collect`` mode each connected robot runs episodes back to back under the configured policy;
every episode lands in the LeRobot v3 dataset at ``data.record_dir``. A live table on the console
and TensorBoard under ``log_dir`` show each robot's rate, reply latency and episode count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path

import numpy as np

from protos import robot_link_pb2 as pb
from trainer.server.auth import ServerAuthConfig
from trainer.server.config import ServeConfig
from trainer.server.episode_runner import run_episode
from trainer.server.link_server import LinkServer, LinkServerConfig
from trainer.server.policy_driver import PolicyDriver
from trainer.server.recorder import LeRobotEpisodeSink
from trainer.server.session import RobotSession, RobotUnavailable

log = logging.getLogger(__name__)


def auth_from(config: ServeConfig) -> ServerAuthConfig:
    server = config.server
    token = None
    if server.token_file:
        path = Path(server.token_file).expanduser()
        if not path.is_file():
            from trainer.server.auth import AuthConfigError

            raise AuthConfigError(f"server.token_file {path} does not exist")
        token = path.read_text().strip()
    from trainer.server.auth import load_robot_tokens

    return ServerAuthConfig(
        token=token,
        tls_cert=server.tls_cert or None,
        tls_key=server.tls_key or None,
        client_ca=server.client_ca or None,
        insecure=server.insecure,
        robot_tokens=load_robot_tokens(server.robot_tokens_file) if server.robot_tokens_file else {},
    )


def link_config(config: ServeConfig) -> LinkServerConfig:
    server = config.server
    return LinkServerConfig(
        host=server.host,
        port=server.port,
        auth=auth_from(config),
        max_session_bytes=server.max_session_bytes,
        reflection=server.reflection,
        health_requires_token=server.health_requires_token,
    )


def collect_policy(config: ServeConfig, dim: int, seed: int):
    rng = np.random.default_rng(seed)
    scale = config.collect.action_scale

    def policy(obs: pb.Observation) -> np.ndarray:
        if config.collect.policy == "hold":
            action = np.zeros(dim, np.float32)
            action[-1] = 1.0
        else:
            action = rng.uniform(-scale, scale, dim).astype(np.float32)
            action[-1] = 1.0 if rng.random() < 0.5 else -1.0
        return action[None]

    return policy


async def collect(session: RobotSession, config: ServeConfig, stop: asyncio.Event) -> None:
    """Episodes back to back on one robot, until it leaves, the quota is met, or the server stops."""
    episode = 0
    while not stop.is_set():
        if config.collect.episodes_per_robot and episode >= config.collect.episodes_per_robot:
            log.info("robot %s: %d episodes collected", session.robot_id, episode)
            return
        seed = config.collect.seed + episode
        try:
            end = await run_episode(session, collect_policy(config, session.spec.action.dim, seed), seed=seed)
        except (RobotUnavailable, asyncio.TimeoutError):
            return
        if end.reason == "robot disconnected":
            return
        episode += 1


class Evaluation:
    """Runs a fixed policy on each robot and keeps per-robot success statistics in a JSON file."""

    def __init__(self, config: ServeConfig) -> None:
        from policies.factory import load_policy

        self.config = config
        self.driver = PolicyDriver(load_policy(config.eval.policy_path), greedy=config.eval.greedy)
        self.path = Path(config.eval.results_file or Path(config.log_dir) / "eval.json")
        self.results: dict[str, dict] = {}

    async def run(self, session: RobotSession, stop: asyncio.Event) -> None:
        problem = self.driver.incompatibility(session)
        if problem:
            log.error("eval: %s; not driving it", problem)
            return
        record = self.results.setdefault(session.robot_id, {"episodes": 0, "successes": 0, "aborted": 0})
        while (
            not stop.is_set() and record["episodes"] + record["aborted"] < self.config.eval.episodes_per_robot
        ):
            try:
                end = await run_episode(
                    session, self.driver.remote_policy(session), seed=record["episodes"] + record["aborted"]
                )
            except (RobotUnavailable, asyncio.TimeoutError):
                return
            if end.kind == pb.EpisodeEvent.ABORTED:
                record["aborted"] += 1
                if end.reason == "robot disconnected":
                    return
                continue
            record["episodes"] += 1
            record["successes"] += int(end.success)
            record["success_rate"] = record["successes"] / record["episodes"]
            self._write()
            log.info("eval %s: %d/%d successes", session.robot_id, record["successes"], record["episodes"])

    def _write(self) -> None:
        import json

        from protos.atomic_files import write_atomic

        write_atomic(
            self.path, json.dumps({"policy": self.config.eval.policy_path, "robots": self.results}, indent=2)
        )


class Console:
    """A live table of the connected robots (rich), plus the same figures in TensorBoard."""

    def __init__(self, server: LinkServer, log_dir: str) -> None:
        from rich.console import Console as RichConsole
        from rich.live import Live
        from torch.utils.tensorboard import SummaryWriter

        self.server = server
        self.live = Live(self.table(), console=RichConsole(stderr=True), refresh_per_second=2)
        self.writer = SummaryWriter(log_dir)
        self.ticks = 0

    def table(self):
        from rich.table import Table

        table = Table(title="robots")
        for column in ("robot", "kind", "state", "rate Hz", "reply ms p50", "episodes", "errors"):
            table.add_column(column)
        for session in self.server.sessions.values():
            replies = list(session.stats.reply_ms)
            table.add_row(
                session.robot_id,
                session.robot_kind,
                session.state,
                f"{session.stats.rate_hz():.1f}",
                f"{np.median(replies):.1f}" if replies else "-",
                str(session.stats.episodes_stored),
                str(session.stats.errors),
            )
        return table

    async def run(self, stop: asyncio.Event) -> None:
        with self.live:
            while not stop.is_set():
                self.live.update(self.table())
                self.ticks += 1
                for session in self.server.sessions.values():
                    tag = f"robots/{session.robot_id}"
                    self.writer.add_scalar(f"{tag}/rate_hz", session.stats.rate_hz(), self.ticks)
                    self.writer.add_scalar(f"{tag}/episodes", session.stats.episodes_stored, self.ticks)
                    if session.stats.reply_ms:
                        self.writer.add_scalar(
                            f"{tag}/reply_ms_p50", float(np.median(session.stats.reply_ms)), self.ticks
                        )
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
        self.writer.close()


async def serve(config: ServeConfig, stop: asyncio.Event, on_started=None) -> LinkServer:
    """Run until ``stop`` is set; returns the (stopped) server. ``on_started(server)`` once it listens."""
    if config.server.view not in ("", "rerun"):
        raise ValueError(f"server.view must be '' or 'rerun', got {config.server.view!r}")
    sink = LeRobotEpisodeSink(config.data.record_dir, config.data.video_format())
    if config.server.mode == "eval":
        evaluation = Evaluation(config)
        on_session = lambda session: evaluation.run(session, stop)  # noqa: E731
    else:
        on_session = lambda session: collect(session, config, stop)  # noqa: E731
    server = LinkServer(link_config(config), sink=sink, on_session=on_session)
    port = await server.start()
    log.info("serving robots on %s:%d (mode %s), recording to %s", config.server.host, port, config.server.mode,
             config.data.record_dir)  # fmt: skip
    if on_started is not None:
        on_started(server)
    views = []
    if config.server.view == "rerun":
        from trainer.viewer import LiveView

        views.append(asyncio.ensure_future(LiveView(server, config.server.view_save).run(stop)))
    console = Console(server, config.log_dir)
    try:
        await console.run(stop)
    finally:
        await asyncio.gather(*views, return_exceptions=True)
        await server.stop(grace=2.0)
        server.store_executor.shutdown(wait=True)  # every acknowledged episode is on disk
    return server


def connected_robots(server: LinkServer) -> list[str]:
    return [robot_id for robot_id, s in server.sessions.items() if s.state != "disconnected"]


def wait_for_robots(link: LinkServer, count: int, timeout_s: float, key: str) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while len(connected_robots(link)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{key}={count}: only {len(connected_robots(link))} robots connected after {timeout_s:.0f} s"
            )
        time.sleep(0.2)


def start_link(config: ServeConfig):
    """The link server on its own loop thread, recording robot episodes to ``data.record_dir``."""
    from trainer.server.link_server import LinkServerThread

    sink = LeRobotEpisodeSink(config.data.record_dir, config.data.video_format())
    link = LinkServer(link_config(config), sink=sink)
    return link, LinkServerThread(link).start()


def stop_link(link: LinkServer, thread) -> None:
    thread.stop(grace=2.0)
    link.store_executor.shutdown(wait=True)  # every acknowledged episode is on disk


def dagger(config: ServeConfig, on_started=None) -> list[dict]:
    """``dagger`` mode: :class:`~trainer.server.dagger.DaggerLoop` rounds on the connected robots."""
    from trainer.server.dagger import DaggerLoop

    link, thread = start_link(config)
    log.info("serving robots on %s:%d (mode dagger: %d rounds), recording to %s", config.server.host,
             link.port, config.dagger.rounds, config.data.record_dir)  # fmt: skip
    if on_started is not None:
        on_started(link)
    try:
        loop = DaggerLoop(config, link, thread.loop, link.sink)
        wait_for_robots(link, config.dagger.min_robots, config.dagger.wait_timeout_s, "dagger.min_robots")
        return loop.run()
    finally:
        stop_link(link, thread)


def train(config: ServeConfig, on_started=None):
    """``train`` mode: the configured algorithm iterates on an :class:`EnvPool` of sim envs + robots.

    The link server runs on its own loop thread; training runs here, so Ctrl-C checkpoints the run
    as ``rlinf-trainer train`` does. Robot episodes are recorded to ``data.record_dir`` as in
    ``collect``. Returns the runner's :class:`~trainer.checkpoint.Progress`.
    """
    from trainer.checkpoint import latest_checkpoint
    from trainer.runner import Runner, make_sim_envs
    from trainer.server.config import training_config
    from trainer.server.env_pool import EnvPool
    from trainer.server.sim_recorder import SimEpisodeRecorder

    training = training_config(config)
    run_dir = Path(training.run.output_dir)
    resume = run_dir if config.train.resume and latest_checkpoint(run_dir) is not None else None
    link, thread = start_link(config)
    log.info("serving robots on %s:%d (mode train: %s on %s), recording robot episodes to %s",
             config.server.host, link.port, training.algorithm, training.env.id, config.data.record_dir)  # fmt: skip
    if on_started is not None:
        on_started(link)
    try:
        wait_for_robots(link, config.train.min_robots, config.train.wait_timeout_s, "train.min_robots")

        def make_envs(cfg):
            weights = {"sim": config.train.sim_weight, "robot": config.train.robot_weight}
            sim = make_sim_envs(cfg)
            recorder = None
            if config.data.sim_record_dir:
                recorder = SimEpisodeRecorder(config.data.sim_record_dir, sim.spec, sim.num_envs,
                                              link.store_executor, config.data.video_format())  # fmt: skip
            return EnvPool(sim, link, thread.loop, weights, config.train.step_timeout_s, seed=cfg.run.seed,
                           sim_recorder=recorder)  # fmt: skip

        return Runner(training, resume_dir=resume, make_envs=make_envs).run()
    finally:
        stop_link(link, thread)


def main(config: ServeConfig) -> int:
    if config.server.mode == "dagger":
        try:
            rows = dagger(config)
        except KeyboardInterrupt:
            return 130
        log.info("dagger done: %d rounds", len(rows))
        return 0
    if config.server.mode == "train":
        try:
            progress = train(config)
        except KeyboardInterrupt:
            return 130
        log.info("training done: %d iterations, %d env steps", progress.iteration, progress.env_steps)
        return 0

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(config, stop)

    asyncio.run(run())
    return 0
