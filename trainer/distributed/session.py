"""Start (or join) Ray, resolve the placement (profiling candidates in ``auto``), build the workers."""

from __future__ import annotations

import logging
import time

from trainer.configs.errors import ConfigError
from trainer.distributed.config import ClusterConfig

log = logging.getLogger(__name__)
AUTO_CANDIDATES = ("collocated", "disaggregated", "hybrid")
OFF_POLICY = ("sac", "rlpd")
RAY_ALGORITHMS = ("ppo", "grpo", *OFF_POLICY)


def ensure_ray(cluster: ClusterConfig) -> None:
    """Join ``cluster.ray_address``, or start a local Ray; a Ray already running here is reused."""
    import ray

    if ray.is_initialized():
        return
    try:
        if cluster.ray_address:
            ray.init(address=cluster.ray_address, log_to_driver=False)
        else:
            start_local_ray(cluster.num_cpus or None)
    except ConnectionError as exc:
        raise ConfigError(
            f"cluster.ray_address={cluster.ray_address!r}: cannot join the Ray cluster ({exc})"
        ) from None


def start_local_ray(num_cpus: int | None, attempts: int = 2) -> None:
    """``ray.init`` of a local cluster, tried again if its raylet does not register within Ray's 30 s
    (seen once on a loaded 2-core VM: Ray's own startup timeout, not a config error)."""
    import ray

    for attempt in range(1, attempts + 1):
        try:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
            return
        except Exception as exc:
            if "timed out during startup" not in str(exc) or attempt == attempts:
                raise
            log.warning("local Ray did not start (%s); trying again", exc)
            ray.shutdown()


def local_cores() -> list[int] | None:
    """This machine's usable cores when the Ray cluster is just this machine (pinning is safe), else None."""
    import os

    import ray

    alive = [node for node in ray.nodes() if node.get("Alive")]
    if len(alive) != 1 or not hasattr(os, "sched_getaffinity"):
        return None
    return sorted(os.sched_getaffinity(0))


def build_distributed(config, policy, algo_config, mode: str | None = None):
    """Ray workers for ``config``: :class:`~trainer.distributed.on_policy.RayOnPolicy` (PPO, GRPO) or
    :class:`~trainer.distributed.off_policy.RayOffPolicy` (SAC, RLPD); placement resolved here."""
    import ray

    from trainer.distributed.on_policy import RayOnPolicy
    from trainer.distributed.placement import plan_placement

    if config.algorithm not in RAY_ALGORITHMS:
        raise ConfigError(
            f"cluster.placement={config.cluster.placement} runs {', '.join(RAY_ALGORITHMS)} on Ray workers; "
            f"{config.algorithm!r} runs with cluster.placement=sequential"
        )
    if config.cluster.schedule == "dynamic" and config.algorithm in OFF_POLICY:
        raise ConfigError(
            f"cluster.schedule=dynamic re-plans on-policy runs (ppo, grpo); {config.algorithm!r} keeps "
            "cluster.schedule=static"
        )
    ensure_ray(config.cluster)
    mode = mode or config.cluster.placement
    if mode == "auto":
        mode = choose_placement(config, policy, algo_config)
    plan = plan_placement(config.cluster, ray.cluster_resources(), mode, local_cores())
    roles = {**plan.role_bundle, **({"env": list(plan.env_bundles)} if plan.env_bundles else {})}
    log.info("placement %s: bundles %s, roles %s, %d stages, policy lag %d", plan.mode, list(plan.bundles),
             roles, plan.pipeline_stages, plan.policy_lag)  # fmt: skip
    if config.algorithm in OFF_POLICY:
        from trainer.distributed.off_policy import RayOffPolicy

        return RayOffPolicy(plan, config, policy, algo_config)
    return RayOnPolicy(plan, config, policy, algo_config)


def choose_placement(config, policy, algo_config) -> str:
    """Profile each candidate for a few iterations (after a warm-up); the fastest wins.

    Off-policy candidates learn from the first step while profiled: a profile spent in the uniform
    warm-up (``learning_starts``) would time the envs alone and miss the learner.
    """
    import copy
    from dataclasses import replace

    note = ""
    if hasattr(algo_config, "learning_starts"):
        algo_config, note = replace(algo_config, learning_starts=0), " (learning from the first step)"
    rates: dict[str, float] = {}
    for mode in AUTO_CANDIDATES:
        trainer = build_distributed(config, copy.deepcopy(policy), algo_config, mode=mode)
        try:
            trainer.iterate(None, 0)
            trainer.flush()
            start, steps = time.perf_counter(), 0
            for i in range(config.cluster.profile_iterations):
                steps += trainer.iterate(None, i + 1).env_steps
            trainer.flush()
            rates[mode] = steps / (time.perf_counter() - start)
        finally:
            trainer.close()
    best = max(rates, key=rates.get)
    table = ", ".join(f"{mode} {rate:.1f}" for mode, rate in rates.items())
    log.info("auto placement%s: env steps/s %s -> %s", note, table, best)
    print(f"auto placement{note}: env steps/s {table} -> {best}")
    return best
