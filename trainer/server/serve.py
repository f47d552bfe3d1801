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
from pathlib import Path

from trainer.server.collect import collect
from trainer.server.config import ServeConfig
from trainer.server.console import Console
from trainer.server.link_hosting import HostedLink, wait_for_robots
from trainer.server.link_server import LinkServer
from trainer.server.robot_eval import Evaluation
from trainer.stop_signals import exit_code

log = logging.getLogger(__name__)


def serve(config: ServeConfig, stop: threading.Event, on_started=None) -> LinkServer:
    """``collect`` or ``eval`` until ``stop`` is set; returns the (stopped) server.
    ``on_started(server)`` once it listens."""
    hosted: HostedLink
    if config.server.mode == "eval":
        evaluation = Evaluation.from_config(config)
        on_session = lambda session: evaluation.run(session, hosted.stop_event)  # noqa: E731
    else:
        on_session = lambda session: collect(session, config, hosted.stop_event)  # noqa: E731
    with HostedLink(config, on_session) as hosted:
        if on_started is not None:
            on_started(hosted.server)
        hosted.spawn(Console(hosted.server, config.log_dir).run(hosted.stop_event))
        while not stop.wait(0.5):
            pass
    return hosted.server


def dagger(config: ServeConfig, on_started=None) -> list[dict]:
    """``dagger`` mode: :class:`~trainer.server.dagger.DaggerLoop` rounds on the connected robots."""
    from trainer.server.dagger import DaggerLoop

    with HostedLink(config, mode=f"dagger, {config.dagger.rounds} rounds") as hosted:
        link = hosted.server
        if on_started is not None:
            on_started(link)
        loop = DaggerLoop(config, link, hosted.loop, link.sink)
        wait_for_robots(link, config.dagger.min_robots, config.dagger.wait_timeout_s, "dagger.min_robots")
        return loop.run()


def train(config: ServeConfig, on_started=None):
    """``train`` mode: the configured algorithm iterates on an :class:`EnvPool` of sim envs + robots.

    The link server runs on its own loop thread; training runs here, so Ctrl-C checkpoints the run
    as ``rlinf-trainer train`` does. Robot episodes are recorded to ``data.record_dir`` as in
    ``collect``. Returns the runner's :class:`~trainer.checkpoint.Progress`.
    """
    from protos.env_spec import spec_mismatch
    from trainer.checkpoint import latest_checkpoint
    from trainer.runner import Runner, make_sim_envs
    from trainer.server.config import training_config
    from trainer.server.env_pool import EnvPool
    from trainer.server.reward_source import reward_factory
    from trainer.server.sim_recorder import SimEpisodeRecorder

    training = training_config(config)
    run_dir = Path(training.run.output_dir)
    resume = run_dir if config.train.resume and latest_checkpoint(run_dir) is not None else None
    with HostedLink(config, mode=f"train: {training.algorithm} on {training.env.id}") as hosted:
        link = hosted.server
        if on_started is not None:
            on_started(link)

        def make_envs(cfg):
            weights = {"sim": config.train.sim_weight, "robot": config.train.robot_weight}
            sim = make_sim_envs(cfg)
            try:  # only robots whose spec fits the sim's count towards train.min_robots
                wait_for_robots(link, config.train.min_robots, config.train.wait_timeout_s, "train.min_robots",
                                misfit=lambda s: spec_mismatch(sim.spec, s.spec, f"robot {s.robot_id}"))  # fmt: skip
            except BaseException:
                sim.close()
                raise
            recorder = None
            if config.data.sim_record_dir:
                recorder = SimEpisodeRecorder(config.data.sim_record_dir, sim.spec, sim.num_envs,
                                              link.store_executor, config.data.video_format())  # fmt: skip
            rewards = reward_factory(config.reward, sim.spec)
            return EnvPool(sim, link, hosted.loop, weights, config.train.step_timeout_s, seed=cfg.run.seed,
                           sim_recorder=recorder, rewards=rewards)  # fmt: skip

        runner = Runner(training, resume_dir=resume, make_envs=make_envs)
        runner.resume_hint = "the same serve command with train.resume=true"
        progress = runner.run()
        if config.train.final_eval_episodes > 0:
            final_robot_eval(config, link, hosted.loop, run_dir)
        return progress


def final_robot_eval(config: ServeConfig, link: LinkServer, loop, run_dir: Path) -> None:
    """The final checkpoint's policy, greedy, on every connected robot -> ``<run_dir>/robot_eval.json``."""
    from trainer.checkpoint import POLICY_DIR, latest_checkpoint
    from trainer.server.robot_eval import evaluate_on_robots

    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        return
    path = run_dir / "robot_eval.json"
    evaluation = Evaluation(str(checkpoint / POLICY_DIR), config.train.final_eval_episodes, True, path)
    results = evaluate_on_robots(link, loop, evaluation)
    for robot_id, record in sorted(results.items()):
        log.info("final eval on robot %s: %d/%d successes (%d aborted)", robot_id, record["successes"],
                 record["episodes"], record["aborted"])  # fmt: skip
    log.info("final robot evaluation -> %s", path)


def main(config: ServeConfig) -> int:
    if config.server.mode == "dagger":
        try:
            rows = dagger(config)
        except KeyboardInterrupt as interrupt:
            return exit_code(interrupt)
        log.info("dagger done: %d rounds", len(rows))
        return 0
    if config.server.mode == "train":
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
