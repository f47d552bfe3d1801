"""The training config schema. Every key is typed; unknown keys are rejected at start."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from policies.config import PolicyConfig
from trainer.distributed.config import ClusterConfig


@dataclass(frozen=True)
class RunConfig:
    """Where and how long a run goes."""

    output_dir: str = ""  # empty: runs/<algorithm>-<env>-<timestamp>
    seed: int = 0  # seeds the weights, the env resets and the sampling
    total_env_steps: int = 600_000  # stop after this many env steps (every env's steps counted)
    max_wall_minutes: float = 0.0  # also stop after this much wall time (0: no limit)
    checkpoint_every: int = 20  # iterations
    keep_checkpoints: int = 3  # the newest N are kept
    eval_every: int = 20  # iterations; 0 disables eval and videos
    eval_episodes: int = 4  # greedy episodes per periodic evaluation
    final_eval_episodes: int = 10  # greedy episodes when a run completes -> final_eval.json (0: none)
    video: bool = True  # write a GIF of one evaluation episode to videos/
    torch_threads: int = 1  # torch's intra-op threads in this process
    device: str = "cpu"  # cpu, cuda or auto (the policy, critics and batches)


@dataclass(frozen=True)
class EnvConfig:
    """Which env, how many copies, and the env's own config keys (see FrankaEnvConfig)."""

    id: str = "rlinf/FrankaPickLift-v0"  # a registered env id (rlinf/... or any gymnasium id)
    num_envs: int = 32  # envs stepped together (every algorithm's batch)
    backend: str = "subprocess"  # "inline" or "subprocess"
    num_workers: int = 2  # subprocess workers sharing the envs (backend=subprocess)
    # Pin each subprocess worker to a free core of its own (sim_envs/core_claims.py); null: pin
    # where there is one worker per core this process may use.
    pin_workers: bool | None = None
    # The interpreter the subprocess workers run: a suite with its own venv (scripts/sim_venv.sh),
    # e.g. .venv-metaworld/bin/python. Empty: this one.
    python: str = ""
    # The env's own config keys; every preset sets them (a Franka task's differ from another env's).
    kwargs: dict[str, Any] = field(default_factory=dict)
    # Keys that replace ``kwargs``' in the greedy evaluations (periodic and final), e.g.
    # {physics_curriculum_successes: 0}: a training-only curriculum does not ease the test.
    eval_kwargs: dict[str, Any] = field(default_factory=dict)
    # Imagined envs beside the simulated ones (trainer/env_mix.py): this many rlinf/WorldModel-v0
    # envs, built from ``world_model`` (their kwargs, e.g. {checkpoint: PATH}); their transitions
    # count ``world_model_weight`` times a simulated one's. Evaluation stays in the sim.
    world_model_envs: int = 0
    world_model: dict[str, Any] = field(
        default_factory=dict
    )  # the imagined envs' kwargs, e.g. {checkpoint: runs/<run>/world_model}
    world_model_weight: float = 1.0  # an imagined transition's weight against a simulated one's (0: none)

    def __post_init__(self) -> None:
        if self.world_model_envs < 0 or self.world_model_weight < 0:
            raise ValueError("env.world_model_envs and env.world_model_weight must be >= 0")
        if self.world_model_envs and not self.world_model.get("checkpoint"):
            raise ValueError(
                "env.world_model_envs needs env.world_model.checkpoint, a trained world model folder"
            )


@dataclass(frozen=True)
class TrainConfig:
    """A sim-only training run. ``algo`` holds the chosen algorithm's own keys."""

    run: RunConfig = field(default_factory=RunConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    algorithm: str = "ppo"  # ppo, grpo, sac, rlpd, bc, reward_classifier or world_model
    algo: dict[str, Any] = field(
        default_factory=dict
    )  # the algorithm's own keys (its table below), e.g. algo.learning_rate=1e-4
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
