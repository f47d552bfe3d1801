"""The sim-only training loop: build envs, policy and algorithm; iterate; log, evaluate, checkpoint.

Each iteration starts every env from a seed derived from (run seed, iteration), so a run resumed
from a checkpoint replays exactly what the uninterrupted run would have done.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import numpy as np
import torch

import policies.world_model  # noqa: F401  (registers rlinf/WorldModel-v0 with sim_envs)
import sim_envs
from policies import make_policy
from protos.atomic_files import write_atomic
from trainer.algorithms.registry import algorithm_class
from trainer.checkpoint import (
    LATEST,
    Progress,
    latest_checkpoint,
    load_checkpoint,
    point_link,
    prune_checkpoints,
    save_checkpoint,
)
from trainer.configs import TrainConfig, save_config
from trainer.configs.loader import ConfigError, algorithm_config
from trainer.configs.paths import require_writable_dir
from trainer.configs.schema import EnvConfig
from trainer.devices import resolve_device
from trainer.evaluation import evaluate_policy
from trainer.learning_curve import plot_learning_curve
from trainer.run_logging import RunLogger, truncate_metrics

CONFIG_FILE = "config.yaml"
FINAL_EVAL_FILE = "final_eval.json"
RAY_WORKERS_FILE = "ray_workers.json"  # on Ray: role -> the node id of each of its workers
FINAL_EVAL_SEED = 20_000_000  # training resets from (seed, iteration) seeds; periodic eval from 10M


def default_output_dir(config: TrainConfig) -> Path:
    env_name = config.env.id.split("/")[-1].split("-")[0]
    return Path("runs") / f"{config.algorithm}-{env_name}-{datetime.now():%Y%m%d-%H%M%S}"


def iteration_seed(config: TrainConfig, iteration: int) -> int:
    return config.run.seed * 1_000_003 + iteration * config.env.num_envs


def make_sim_envs(config: TrainConfig):
    """The run's trainer-side envs: the configured env, and imagined ones beside it if asked."""
    main = _make_env(config)
    if not config.env.world_model_envs:
        return main
    from policies.world_model.env import WorldModelVectorEnv
    from trainer.env_mix import MixedVectorEnv

    try:
        imagined = WorldModelVectorEnv(num_envs=config.env.world_model_envs, **config.env.world_model)
        return MixedVectorEnv([main, imagined], {"world_model": config.env.world_model_weight})
    except BaseException:
        main.close()
        raise


def _make_env(config: TrainConfig):
    return sim_envs.make_vector(
        config.env.id,
        config.env.num_envs,
        backend=config.env.backend,
        num_workers=config.env.num_workers,
        python=config.env.python,
        pin_workers=config.env.pin_workers,
        **config.env.kwargs,
    )


def evaluates_through_vector_env(env: EnvConfig) -> bool:
    """Whether greedy evaluation goes through the vector env: a batched one (a world model, IsaacLab)
    or another interpreter's workers (``env.python``), rather than one env here."""
    return bool(env.python) or env_entry(env).batched


def env_entry(env: EnvConfig) -> sim_envs.EnvEntry:
    """What the env id needs (another interpreter's env: only what our table says, nothing imported)."""
    if env.python:
        return sim_envs.ENVS.get(env.id, sim_envs.registry.OUTSIDE)
    return sim_envs.env_entry(env.id, env.kwargs.get("module", ""))


def check_eval_kwargs(config: TrainConfig) -> None:
    """Build one evaluation env now where ``env.eval_kwargs`` is set, so that a bad key fails before
    the training budget is spent rather than at the first evaluation (this process's envs only)."""
    env = config.env
    if not env.eval_kwargs or evaluates_through_vector_env(env):
        return
    try:
        sim_envs.make(env.id, **{**env.kwargs, **env.eval_kwargs}).close()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"env.eval_kwargs: {exc}") from None


class Runner:
    """Owns one training run from start (or resume) to ``run.total_env_steps``.

    ``make_envs(config)`` builds the vector env; the default is the config's sim envs. The trainer
    server passes one that returns an :class:`~trainer.server.env_pool.EnvPool` of sim envs and
    robots. An env with ``refresh()`` gets it called between iterations (robots joining, leaving).
    """

    def __init__(
        self, config: TrainConfig, resume_dir: Path | None = None, make_envs: Callable | None = None
    ) -> None:
        self.default_named = resume_dir is None and not config.run.output_dir  # runs/<algo>-<env>-<time>
        if resume_dir is None:
            output_dir = Path(config.run.output_dir) if config.run.output_dir else default_output_dir(config)
            if latest_checkpoint(output_dir) is not None:
                raise ConfigError(
                    f"{output_dir} already holds a run; pass --resume {output_dir} or another run.output_dir"
                )
            config = replace(config, run=replace(config.run, output_dir=str(output_dir)))
        self.config = config
        self.run_dir = Path(config.run.output_dir)
        self.resume_dir = resume_dir
        torch.set_num_threads(config.run.torch_threads)
        torch.manual_seed(config.run.seed)
        self.algo_cfg = algorithm_config(config)
        self.make_envs = make_envs or make_sim_envs
        self.resume_hint = f"rlinf-trainer train --resume {self.run_dir}"  # serve says its own way

    def _build(self):
        cfg = self.config
        check_eval_kwargs(cfg)
        if cfg.cluster.placement != "sequential":
            # Envs, inference and updates live in Ray workers; one object plays venv and algorithm.
            from trainer.distributed.session import build_distributed

            if not env_entry(cfg.env).env:
                raise ConfigError(
                    f"{cfg.env.id} runs with cluster.placement=sequential: the simulator owns its process"
                )
            if cfg.env.python:
                raise ConfigError(
                    "env.python applies to sequential runs (cluster.placement=sequential); Ray's env "
                    "workers step their envs in their own interpreter"
                )
            if cfg.run.device not in ("cpu", "auto"):
                raise ConfigError(
                    f"run.device={cfg.run.device!r} applies to sequential runs; on Ray each worker's "
                    "device follows its bundle (name GPU in the actor's and rollout's cluster.bundles)"
                )
            spec_env = sim_envs.make(cfg.env.id, **cfg.env.kwargs)
            policy = make_policy(spec_env.env_spec, cfg.policy)
            spec_env.close()
            distributed = build_distributed(cfg, policy, self.algo_cfg)
            return distributed, policy, distributed
        device = resolve_device(cfg.run.device)
        venv = self.make_envs(cfg)
        policy = make_policy(venv.spec, cfg.policy).to(device)
        algorithm = algorithm_class(cfg.algorithm)(policy, self.algo_cfg)
        return venv, policy, algorithm

    def run(self) -> Progress:
        cfg = self.config
        require_writable_dir(self.run_dir, "run.output_dir")  # before minutes of work are lost
        venv, policy, algorithm = self._build()  # bad input fails here, before a run directory exists
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.default_named:  # runs/latest: the newest default-named run, a path that stays the same
            point_link(self.run_dir.parent / LATEST, self.run_dir.name)
        print(f"run directory: {self.run_dir}")
        save_config(cfg, self.run_dir / CONFIG_FILE)
        if hasattr(venv, "started_on"):  # on Ray: where each role's workers started, for a multi-node check
            write_atomic(self.run_dir / RAY_WORKERS_FILE, json.dumps(venv.started_on, indent=2) + "\n")
        progress = Progress()
        checkpoint = latest_checkpoint(self.run_dir) if self.resume_dir else None
        if checkpoint is not None:
            progress = load_checkpoint(checkpoint, policy, algorithm)
            truncate_metrics(self.run_dir, progress.iteration)
            print(
                f"resumed from {checkpoint} (iteration {progress.iteration}, {progress.env_steps} env steps)"
            )
        logger = RunLogger(
            self.run_dir, cfg.run.total_env_steps, progress.env_steps, f"{cfg.algorithm} {cfg.env.id}"
        )
        saved_at = progress.iteration
        start_wall = time.perf_counter() - progress.wall_s
        try:
            while progress.env_steps < cfg.run.total_env_steps and not self._out_of_time(progress):
                tick = time.perf_counter()
                if hasattr(venv, "refresh"):  # a sim + robot pool: robots join between iterations
                    venv.refresh(policy_version=progress.iteration)
                result = algorithm.iterate(venv, iteration_seed(cfg, progress.iteration))
                progress.iteration += 1
                progress.env_steps += result.env_steps
                progress.wall_s = time.perf_counter() - start_wall
                metrics = self._metrics(progress, result, time.perf_counter() - tick)
                metrics.update(source_metrics(venv, result.finished))
                if hasattr(venv, "robot_timing"):  # a sim + robot pool: the robots' ticks it cost
                    metrics.update(venv.robot_timing())
                if cfg.run.eval_every and progress.iteration % cfg.run.eval_every == 0:
                    current_policy(algorithm)
                    metrics.update(self._evaluate(policy, progress))
                logger.log(metrics)
                if progress.iteration % cfg.run.checkpoint_every == 0:
                    save_checkpoint(self.run_dir, progress, policy, algorithm)
                    prune_checkpoints(self.run_dir, cfg.run.keep_checkpoints)
                    plot_learning_curve(self.run_dir)
                    saved_at = progress.iteration
        except KeyboardInterrupt:
            logger.close()
            if progress.iteration > saved_at:
                path = save_checkpoint(self.run_dir, progress, policy, algorithm)
                print(f"\ninterrupted: saved {path}; continue with {self.resume_hint}")
            plot_learning_curve(self.run_dir)
            venv.close()
            raise
        if progress.iteration > saved_at:
            save_checkpoint(self.run_dir, progress, policy, algorithm)
            prune_checkpoints(self.run_dir, cfg.run.keep_checkpoints)
        logger.close()
        plot_learning_curve(self.run_dir)
        current_policy(algorithm)
        venv.close()
        if cfg.run.final_eval_episodes > 0:
            self._final_evaluation(policy, progress)
        return progress

    def _out_of_time(self, progress: Progress) -> bool:
        limit = self.config.run.max_wall_minutes
        return limit > 0 and progress.wall_s >= limit * 60.0

    def _metrics(self, progress: Progress, result, iteration_s: float) -> dict:
        from trainer.algorithms.common import episode_metrics

        return {
            "iteration": progress.iteration,
            "env_steps": progress.env_steps,
            "wall_s": round(progress.wall_s, 3),
            **episode_metrics(result.finished),
            "steps_per_s": result.env_steps / max(iteration_s, 1e-9),
            **{f"train/{k}": v for k, v in result.metrics.items()},
        }

    def _evaluate(self, policy, progress: Progress) -> dict:
        cfg = self.config
        video = self.run_dir / "videos" / f"step_{progress.env_steps}.gif" if cfg.run.video else None
        stats = self._greedy_episodes(policy, cfg.run.eval_episodes, 10_000_000, video)
        return {f"eval/{k.removeprefix('eval_')}": v for k, v in stats.items()}

    def _greedy_episodes(self, policy, episodes: int, seed: int, video: Path | None) -> dict[str, float]:
        """Greedy success and return in the run's env; in a world model (imagined), a batched suite
        (IsaacLab) or another interpreter's workers (``env.python``), through the vector env and
        without a video."""
        cfg = self.config
        kwargs = {**cfg.env.kwargs, **cfg.env.eval_kwargs}
        if not evaluates_through_vector_env(cfg.env):
            return evaluate_policy(policy, cfg.env.id, kwargs, episodes, seed, video_path=video)
        from trainer.algorithms.common import play_greedy

        eval_env = replace(cfg.env, num_envs=episodes, world_model_envs=0, kwargs=kwargs)
        venv = make_sim_envs(replace(cfg, env=eval_env))
        try:
            finished = play_greedy(venv, policy, seed)[1]
        finally:
            venv.close()
        first = {e.env_index: e for e in reversed(finished)}  # each env's first episode
        return {
            "eval_return_mean": float(np.mean([e.episode_return for e in first.values()])),
            "eval_success_rate": float(np.mean([e.success for e in first.values()])),
        }

    def _final_evaluation(self, policy, progress: Progress) -> dict:
        """Greedy episodes on seeds training never resets from, with a GIF: ``final_eval.json``."""
        cfg = self.config
        episodes = cfg.run.final_eval_episodes
        video = self.run_dir / "videos" / "final.gif" if cfg.run.video else None
        print(f"final evaluation: {episodes} greedy episodes on held-out seeds ...", flush=True)
        stats = self._greedy_episodes(policy, episodes, FINAL_EVAL_SEED, video)
        report = {
            "success_rate": stats["eval_success_rate"],
            "return_mean": stats["eval_return_mean"],
            "episodes": episodes,
            "seed": FINAL_EVAL_SEED,
            "iteration": progress.iteration,
            "env_steps": progress.env_steps,
            "video": str(video) if video is not None and video.exists() else "",
            "imagined": env_entry(cfg.env).imagined,  # in a learned model, not a simulator
        }
        write_atomic(self.run_dir / FINAL_EVAL_FILE, json.dumps(report, indent=2) + "\n")
        shown = f"; video {report['video']}" if report["video"] else ""
        print(
            f"final evaluation: success {report['success_rate']:.2f}, return {report['return_mean']:.1f} "
            f"over {episodes} episodes{shown}"
        )
        return report


def current_policy(algorithm) -> None:
    """On Ray the driver's policy follows the learner's weights only when asked (``sync_policy``)."""
    sync = getattr(algorithm, "sync_policy", None)
    if sync is not None:
        sync()


def source_metrics(venv, finished) -> dict:
    """Per-source episode figures (``source/robot:twin/success_rate``...) when the env mixes sources."""
    sources = getattr(venv, "sources", None)
    if not sources:
        return {}
    from trainer.algorithms.common import episode_metrics

    metrics = {}
    for source in sorted(set(sources)):
        episodes = [e for e in finished if sources[e.env_index] == source]
        metrics[f"source/{source}/episodes"] = len(episodes)
        if episodes:
            metrics.update({f"source/{source}/{k}": v for k, v in episode_metrics(episodes).items()})
    return metrics
