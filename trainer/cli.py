"""``rlinf-trainer``: sim-only training runs, the robot-facing server, quick rollouts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from protos.cli_help import plain_help
from protos.user_error import UserError


def _rollout(args: argparse.Namespace) -> int:
    from trainer.demo import run_rollout

    result = run_rollout(args.env, args.policy, args.episodes, Path(args.out), args.seed)
    print(
        f"{result.episodes} episodes, success rate {result.success_rate:.2f}, "
        f"mean return {result.return_mean:.2f}; frames in {result.video_path}"
    )
    return 0


def _train(args: argparse.Namespace) -> int:
    from trainer.configs import load_config
    from trainer.configs.errors import ConfigError
    from trainer.runner import CONFIG_FILE, Runner

    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / CONFIG_FILE).exists():
            raise ConfigError(f"--resume {run_dir}: no {CONFIG_FILE} there (not a run directory)")
        if args.config:
            raise ConfigError("--resume takes the run's own config; pass changes as key=value overrides")
        config = load_config(str(run_dir / CONFIG_FILE), args.overrides)
        runner = Runner(config, resume_dir=run_dir)
    else:
        config = load_config(args.config, args.overrides)
        if config.algorithm in ("reward_classifier", "world_model"):
            return _train_supervised(config)
        runner = Runner(config)
    from trainer.stop_signals import Stopped, stop_signals_interrupt

    try:
        with stop_signals_interrupt():
            progress = runner.run()
    except Stopped as stopped:
        return 128 + stopped.signal
    print(
        f"done: {progress.iteration} iterations, {progress.env_steps} env steps in {progress.wall_s:.0f} s; outputs in "
        f"{runner.run_dir} (learning_curve.png; policy in checkpoints/latest/policy; TensorBoard: "
        f"tensorboard --logdir {runner.run_dir / 'tensorboard'})"
    )
    return 0


def _train_supervised(config) -> int:
    """The reward classifier or a world model: fitted from a dataset, no envs stepped."""
    import sim_envs
    from trainer.configs.loader import algorithm_config, save_config
    from trainer.runner import CONFIG_FILE, default_output_dir

    run_dir = Path(config.run.output_dir) if config.run.output_dir else default_output_dir(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / CONFIG_FILE)
    env = sim_envs.make(config.env.id, **config.env.kwargs)  # the spec the classifier reads
    spec = env.env_spec
    env.close()
    if config.algorithm == "world_model":
        from trainer.devices import resolve_device
        from trainer.world_model_training import HORIZONS, train_world_model

        device = resolve_device(config.run.device)
        metrics = train_world_model(algorithm_config(config), spec, run_dir, config.run.seed, device)
        errors = ", ".join(
            f"{h}: {metrics.get(f'state_error_{h}', float('nan')):.4f} (copy-last {metrics.get(f'state_error_copy_last_{h}', float('nan')):.4f})"
            for h in HORIZONS
        )
        print(f"held-out open-loop state error by horizon {errors}; model in {run_dir / 'world_model'}")
        return 0
    from trainer.reward_training import train_reward_classifier

    metrics = train_reward_classifier(algorithm_config(config), spec, run_dir, config.run.seed)
    print(
        f"held out ({metrics['frames']} frames, {metrics['positives']} successful): precision "
        f"{metrics['precision']:.3f}, recall {metrics['recall']:.3f}, calibration error "
        f"{metrics['expected_calibration_error']:.3f}; classifier in {run_dir / 'classifier'}"
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    import logging

    from trainer.server.auth import AuthConfigError
    from trainer.server.config import load_serve_config
    from trainer.server.dagger import DaggerError
    from trainer.server.serve import main

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = list(args.overrides) + (["server.insecure=true"] if args.insecure else [])
    config = load_serve_config(args.config, overrides)
    if config.server.insecure:
        print(
            "rlinf-trainer serve: WARNING: --insecure: no TLS and no token on the robot link", file=sys.stderr
        )
    from trainer.stop_signals import stop_signals_interrupt

    try:
        if config.server.mode in ("train", "dagger"):  # SIGTERM checkpoints as Ctrl-C does
            with stop_signals_interrupt():
                return main(config)
        return main(config)
    except (AuthConfigError, OSError, DaggerError) as exc:
        print(f"rlinf-trainer serve: {exc}", file=sys.stderr)
        return 2


def _demos(args: argparse.Namespace) -> int:
    import yaml

    from trainer.expert_demos import DemoConfig, record_expert_demos, record_expert_demos_in

    kwargs = yaml.safe_load(args.env_kwargs) if args.env_kwargs else {}
    if not isinstance(kwargs, dict):
        raise UserError(
            f"--env-kwargs must be a YAML mapping, e.g. '{{cameras: [front]}}'; got {args.env_kwargs!r}"
        )
    if args.action_noise < 0:
        raise UserError(f"--action-noise must be >= 0, got {args.action_noise}")
    config = DemoConfig(
        args.env, args.episodes, args.out, args.seed, True, kwargs, args.action_noise, args.teacher
    )
    if args.python:
        return record_expert_demos_in(args.python, config)
    print(record_expert_demos(config).line())
    return 0


def _view(args: argparse.Namespace) -> int:
    from trainer.viewer import ViewConfig, view

    frames = view(ViewConfig(args.dataset, args.episode, args.save or ""))
    where = f"saved to {args.save}" if args.save else "sent to the rerun viewer"
    print(f"episode {args.episode}: {frames} frames {where}")
    return 0


def preset_names() -> list[str]:
    """The YAML presets in trainer/configs/ (read without importing the trainer's heavy modules)."""
    return sorted(p.stem for p in (Path(__file__).parent / "configs").glob("*.yaml"))


def serve_preset_names() -> list[str]:
    """The serve presets in trainer/configs/serve/ (e.g. cotrain_pick_lift)."""
    return sorted(p.stem for p in (Path(__file__).parent / "configs" / "serve").glob("*.yaml"))


DESCRIPTION = """rlinf-trainer: RL post-training of robot policies in simulation and on real robots.

  rlinf-trainer train                  PPO on the MuJoCo Franka pick-lift task, on the CPU
  rlinf-trainer serve --insecure       serve robot agents (rlinf-robot connect) on port 50051
  rlinf-trainer COMMAND --help         each command's options

Docs: docs/ (mkdocs serve), every config key in docs/reference/configuration.md."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlinf-trainer", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = sub.add_parser(
        "train",
        help="sim-only RL training run (default: PPO on FrankaPickLift, CPU)",
        description="A training run in simulation. Every config key, its type and default:\n"
        "docs/reference/configuration.md (the 'rlinf-trainer train' section); set any as key=value.",
    )
    train.add_argument(
        "--config",
        default=None,
        help=f"a preset ({', '.join(preset_names())}) or a YAML path (default: ppo_pick_lift)",
    )
    train.add_argument(
        "--resume", default=None, metavar="DIR", help="continue the run in DIR from its last checkpoint"
    )
    train.add_argument("overrides", nargs="*", help="key=value overrides, e.g. run.total_env_steps=200000")
    train.set_defaults(func=_train)

    rollout = sub.add_parser(
        "rollout",
        help="play a policy (random, scripted or a checkpoint) in a sim env and save its frames",
        description="Play a policy in a sim env: a GIF, the last frame and summary.json in --out.",
    )
    rollout.add_argument("--env", default="rlinf/FrankaPickLift-v0", help="a registered env id")
    rollout.add_argument(
        "--policy", default="scripted", help="random, scripted (the task's expert) or a saved policy folder"
    )
    rollout.add_argument("--episodes", type=int, default=3, help="episodes to play")
    rollout.add_argument(
        "--out",
        default="runs/rollout",
        help="folder for the GIF, the last frame and a summary",
    )
    rollout.add_argument("--seed", type=int, default=0, help="seed of the first episode; the next add 1")
    rollout.set_defaults(func=_rollout)

    demos = sub.add_parser(
        "demos",
        help="record scripted-expert episodes as a LeRobot v3 dataset (for BC / SFT)",
        description="Record the task's scripted expert (or a saved state policy) as a LeRobot v3 dataset.",
    )
    demos.add_argument("--env", default="rlinf/FrankaPickColor-v0", help="a registered env id")
    demos.add_argument("--episodes", type=int, default=20, help="episodes to record")
    demos.add_argument("--out", default="runs/demos", help="the dataset folder (appended to if it exists)")
    demos.add_argument(
        "--seed", type=int, default=10_000, help="reset seed of the first episode; the next add 1"
    )
    demos.add_argument(
        "--teacher",
        default="",
        help="a saved state policy that acts instead of the scripted expert (distilling it into the "
        "policy the env's cameras and state are recorded for)",
    )
    demos.add_argument(
        "--action-noise",
        type=float,
        default=0.0,
        help="DART: carry out the expert's actions plus Gaussian noise of this std (action units); "
        "the recorded labels stay the expert's",
    )
    demos.add_argument(
        "--env-kwargs",
        default="",
        help="YAML mapping of env config keys, e.g. '{cameras: [front], privileged_state: false}'",
    )
    demos.add_argument(
        "--python",
        default="",
        help="record in this interpreter: a suite's own venv, e.g. .venv-metaworld/bin/python",
    )
    demos.set_defaults(func=_demos)

    serve = sub.add_parser(
        "serve",
        help="serve robot agents over gRPC: collect episodes, evaluate, train on sim + robots, or run DAgger rounds",
        description="Serve robot agents (rlinf-robot connect) over gRPC, by default on port 50051\n"
        "(server.port) of every interface (server.host). server.mode picks the work:\n"
        "  collect  drive every robot (collect.policy: random or hold) and record every episode (default)\n"
        "  eval     run a saved policy (eval.policy_path) on each robot; results in <log_dir>/eval.json\n"
        "  train    a training config (train.config) on sim envs plus every robot whose spec fits\n"
        "  dagger   HG-DAgger rounds: the policy acts, humans take over, BC refits each round\n"
        "Every key: docs/reference/configuration.md (the 'rlinf-trainer serve' section).",
    )
    serve.add_argument(
        "--config",
        default=None,
        help="a serve preset (" + ", ".join(serve_preset_names()) + ") or a YAML file (sections: server, "
        "data, collect, eval, train, dagger, reward)",
    )
    serve.add_argument("--insecure", action="store_true", help="no TLS, no token: trusted networks only")
    serve.add_argument(
        "overrides", nargs="*", help="key=value, e.g. server.port=50052 data.record_dir=runs/ds"
    )
    serve.set_defaults(func=_serve)

    viewer = sub.add_parser(
        "view",
        help="show a recorded episode (cameras, actions, rewards, interventions, labels) in rerun",
        description="Show a recorded episode in the rerun viewer (needs a screen), or save it with --save.",
    )
    viewer.add_argument("dataset", help="a LeRobot v3 dataset folder (e.g. data.record_dir)")
    viewer.add_argument("--episode", type=int, default=0, help="episode index")
    viewer.add_argument("--save", default=None, help="write an .rrd file instead of opening the viewer")
    viewer.set_defaults(func=_view)
    return plain_help(parser)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except Exception as exc:
        if is_user_error(exc):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise  # a bug: its traceback is what a report needs


def is_user_error(exc: BaseException) -> bool:
    """A mistake the user can fix (printed as one line), as against a bug (kept with its traceback)."""
    if isinstance(exc, UserError):
        return True
    omegaconf_errors = sys.modules.get("omegaconf.errors")  # the config library's own, if it is loaded
    return omegaconf_errors is not None and isinstance(exc, omegaconf_errors.OmegaConfBaseException)


if __name__ == "__main__":
    sys.exit(main())
