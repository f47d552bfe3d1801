"""Placement: the same PPO workload (84 px images, CNN policy) run sequentially and on Ray in
collocated, disaggregated and hybrid placement, in one run.

Each mode plays ``--iterations`` timed PPO iterations (after one warm-up) of ``--num-envs`` envs x one
episode each, and reports env steps/s, the ratio of the best pipelined mode to sequential, and
where the time goes: each role's busy seconds against the wall clock (RLinf-style breakdown).

    python benchmarks/placement.py [--iterations 3] [--num-envs 8] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

import sim_envs
from policies import make_policy
from trainer.algorithms.common import collect_on_policy, decisions_per_episode, policy_cameras
from trainer.algorithms.ppo import PPO, PPOConfig
from trainer.configs import load_config
from trainer.distributed.config import ClusterConfig

MODES = ("collocated", "disaggregated", "hybrid")


def workload(num_envs: int):
    config = load_config("ppo_reach", [
        f"env.num_envs={num_envs}", "env.backend=inline",
        "env.kwargs={cameras: [front], image_height: 84, image_width: 84, action_rotation: false, privileged_state: false}",
        "policy.kind=cnn", "policy.cameras=[front]", "policy.hidden_sizes=[64]",
    ])  # fmt: skip
    return config, PPOConfig(update_epochs=2, num_minibatches=4)


def run_sequential(config, ppo_cfg, iterations: int) -> dict:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    venv = sim_envs.make_vector(config.env.id, config.env.num_envs, backend="inline", **config.env.kwargs)
    ppo = PPO(make_policy(venv.spec, config.policy), ppo_cfg)
    busy = {"env+rollout": 0.0, "actor": 0.0}
    rates = []
    for i in range(iterations + 1):
        tick = time.perf_counter()
        batch = collect_on_policy(venv, ppo.policy, i * 100, decisions_per_episode(venv, ppo.policy),
                                  policy_cameras(ppo.policy))  # fmt: skip
        mid = time.perf_counter()
        ppo.update(batch)
        done = time.perf_counter()
        if i:
            busy["env+rollout"] += mid - tick
            busy["actor"] += done - mid
            rates.append(batch.env_steps / (done - tick))
    venv.close()
    return {"steps_per_s": statistics.median(rates), "rates": rates, "busy_s": busy}


def run_ray(mode: str, config, ppo_cfg, iterations: int) -> dict:
    import ray

    from trainer.distributed.placement import plan_placement
    from trainer.distributed.ppo_pipeline import RayPPO

    plan = plan_placement(ClusterConfig(placement=mode), ray.cluster_resources())
    policy = make_policy(sim_envs.make(config.env.id, **config.env.kwargs).env_spec, config.policy)
    trainer = RayPPO(plan, config, policy, ppo_cfg)
    rates, wall = [], 0.0
    try:
        trainer.iterate(None, 0)  # warm-up
        trainer.flush()
        busy0 = trainer.busy_seconds()
        start = time.perf_counter()
        for i in range(1, iterations + 1):
            tick = time.perf_counter()
            result = trainer.iterate(None, i * 100)
            rates.append(result.env_steps / (time.perf_counter() - tick))
        trainer.flush()
        wall = time.perf_counter() - start
        busy = {k: v - busy0[k] for k, v in trainer.busy_seconds().items()}
    finally:
        trainer.close()
    return {
        "steps_per_s": statistics.median(rates), "rates": rates, "busy_s": busy, "wall_s": wall,
        "bundles": [dict(b) for b in plan.bundles], "roles": plan.role_bundle,
        "pipeline_stages": plan.pipeline_stages, "policy_lag": plan.policy_lag,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "placement.json")
    args = parser.parse_args()
    import ray

    config, ppo_cfg = workload(args.num_envs)
    results = {"sequential": run_sequential(config, ppo_cfg, args.iterations)}
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        for mode in MODES:
            results[mode] = run_ray(mode, config, ppo_cfg, args.iterations)
    finally:
        ray.shutdown()
    base = results["sequential"]["steps_per_s"]
    best = max(("disaggregated", "hybrid"), key=lambda m: results[m]["steps_per_s"])
    print(f"PPO FrankaReach, 84 px CNN, {args.num_envs} envs, {args.iterations} timed iterations per mode")
    for mode, result in results.items():
        busy = ", ".join(f"{k} {v:.1f} s" for k, v in result["busy_s"].items())
        print(
            f"  {mode:14s} {result['steps_per_s']:7.1f} env steps/s  ({result['steps_per_s'] / base:.2f}x)  busy: {busy}"
        )
    ratio = results[best]["steps_per_s"] / base
    print(f"best pipelined ({best}) / sequential: {ratio:.2f}x (target >= 1.6x)")
    payload = {
        "benchmark": "placement", "machine": platform.platform(), "cpus": os.cpu_count(),
        "num_envs": args.num_envs, "iterations": args.iterations, "results": results,
        "best_pipelined": best, "ratio_vs_sequential": ratio,
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
