"""``server.mode=train``: the configured algorithm iterates on an env pool of sim envs + the
connected robots, then the final policy is evaluated on the robots (``train.final_eval_episodes``)."""

from __future__ import annotations

import logging
from pathlib import Path

from trainer.server.config import ServeConfig
from trainer.server.link_hosting import HostedLink, wait_for_robots
from trainer.server.link_server import LinkServer
from trainer.server.robot_eval import Evaluation

log = logging.getLogger(__name__)


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
    from trainer.server.judged_episodes import JudgedEpisodes
    from trainer.server.reward_source import reward_factory
    from trainer.server.sim_recorder import SimEpisodeRecorder

    training = training_config(config)
    run_dir = Path(training.run.output_dir)
    resume = run_dir if config.train.resume and latest_checkpoint(run_dir) is not None else None
    judged = JudgedEpisodes(config.reward.source)  # recorded with the robots' frames
    with HostedLink(
        config, mode=f"train: {training.algorithm} on {training.env.id}", judged=judged
    ) as hosted:
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
                           sim_recorder=recorder, rewards=rewards, judged=judged,
                           frame_decode=config.server.frame_decode)  # fmt: skip

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
