"""Placement: the same PPO workload (84 px images, CNN policy) run sequentially and on Ray in
collocated, disaggregated and hybrid placement, in one run.

Each mode plays ``--iterations`` timed PPO iterations (after one warm-up) of ``--num-envs`` envs x one
episode each; env steps/s is the timed steps over the timed wall clock, which includes the last
update. It reports the ratio of the best pipelined mode to sequential and where the time goes:
each role's CPU seconds (process time, all its threads) and the wall seconds it spent inside work
calls (an RLinf-style latency breakdown). In-call wall above CPU is time spent waiting for a core.

With ``--gpu`` (a GPU box) the policy runs on the GPU: the sequential baseline's, and on Ray the
rollout and actor share a GPU bundle (disaggregated: half a GPU each); collocated is run both
plain and with ``cluster.offload``. ``--stages`` sets the env pipeline stages (one process each).

    python benchmarks/placement.py [--repeats 3] [--iterations 2] [--num-envs 16] [--task FrankaPickLift]
                                   [--gpu] [--stages 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch
from rounds import interleaved_rounds  # benchmarks/rounds.py, beside this script

import sim_envs
from policies import make_policy
from trainer.algorithms.common import collect_on_policy, decisions_per_episode
from trainer.algorithms.ppo import PPO, PPOConfig
from trainer.configs import load_config
from trainer.distributed.config import ClusterConfig

MODES = ("collocated", "disaggregated", "hybrid")
PIPELINED = ("disaggregated", "hybrid")


def workload(num_envs: int, task: str, epochs: int, minibatches: int):
    config = load_config("ppo_reach", [
        f"env.id=rlinf/{task}-v0", f"env.num_envs={num_envs}", "env.backend=inline",
        "env.kwargs={cameras: [front], image_height: 84, image_width: 84, action_rotation: false, privileged_state: false}",
        "policy.kind=cnn", "policy.cameras=[front]", "policy.hidden_sizes=[64]",
    ])  # fmt: skip
    return config, PPOConfig(update_epochs=epochs, num_minibatches=minibatches)


def run_sequential(config, ppo_cfg, iterations: int, device: str = "cpu") -> dict:
    """The baseline: one process, one thread, collect then update (``cluster.placement=sequential``)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    venv = sim_envs.make_vector(config.env.id, config.env.num_envs, backend="inline", **config.env.kwargs)
    ppo = PPO(make_policy(venv.spec, config.policy).to(device), ppo_cfg)
    busy = {"env+rollout": {"wall_s": 0.0, "cpu_s": 0.0}, "actor": {"wall_s": 0.0, "cpu_s": 0.0}}
    steps, start = 0, 0.0
    for i in range(iterations + 1):
        if i == 1:
            start = time.perf_counter()  # iteration 0 is the warm-up
        tick, tick_cpu = time.perf_counter(), time.process_time()
        batch = collect_on_policy(venv, ppo.policy, i * 100, decisions_per_episode(venv, ppo.policy),
                                  ppo.policy.cameras)  # fmt: skip
        mid, mid_cpu = time.perf_counter(), time.process_time()
        ppo.update(batch)
        if device != "cpu":
            torch.cuda.synchronize()
        if i:
            busy["env+rollout"]["wall_s"] += mid - tick
            busy["env+rollout"]["cpu_s"] += mid_cpu - tick_cpu
            busy["actor"]["wall_s"] += time.perf_counter() - mid
            busy["actor"]["cpu_s"] += time.process_time() - mid_cpu
            steps += batch.env_steps
    wall = time.perf_counter() - start
    venv.close()
    return {"steps_per_s": steps / wall, "busy_s": busy, "wall_s": wall}


def cluster_for(mode: str, gpu: bool, stages: int, pin: bool) -> ClusterConfig:
    """The mode's cluster config. CPU: the default plans. GPU: rollout and actor on the GPU, the
    env stages on the other cores (two CPUs go with each GPU worker)."""
    offload = mode == "collocated+offload"
    mode = mode.removesuffix("+offload")
    cluster = ClusterConfig(placement=mode, pin_cpus=pin, pipeline_stages=stages, offload=offload)
    if not gpu:
        return cluster
    cpus = float(os.cpu_count() or 2)
    if mode == "collocated":
        cluster.bundles = [{"CPU": cpus, "GPU": 1.0}]
    elif mode == "disaggregated":
        cluster.bundles = [{"CPU": cpus - 4}, {"CPU": 2.0, "GPU": 0.5}, {"CPU": 2.0, "GPU": 0.5}]
    else:
        cluster.bundles = [{"CPU": cpus - 2}, {"CPU": 2.0, "GPU": 1.0}]
        cluster.roles = {"env": 0, "rollout": 1, "actor": 1}
    return cluster


def run_ray(config, ppo_cfg, iterations: int, cluster: ClusterConfig) -> dict:
    import ray

    from trainer.distributed.on_policy import RayOnPolicy
    from trainer.distributed.placement import plan_placement
    from trainer.distributed.session import local_cores

    plan = plan_placement(cluster, ray.cluster_resources(), cores=local_cores())
    policy = make_policy(sim_envs.make(config.env.id, **config.env.kwargs).env_spec, config.policy)
    trainer = RayOnPolicy(plan, config, policy, ppo_cfg)
    try:
        trainer.iterate(None, 0)  # warm-up
        trainer.flush()
        busy0 = trainer.busy_seconds()
        start, start_cpu, steps = time.perf_counter(), time.process_time(), 0
        for i in range(1, iterations + 1):
            steps += trainer.iterate(None, i * 100).env_steps
        trainer.flush()  # the last update is inside the timed window
        wall, driver_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        busy = {
            role: {key: value - busy0[role][key] for key, value in clock.items()}
            for role, clock in trainer.busy_seconds().items()
        }
        busy["driver"] = {"cpu_s": driver_cpu, "wall_s": wall}  # the loop itself: submitting, gathering
    finally:
        trainer.close()
    return {
        "steps_per_s": steps / wall, "busy_s": busy, "wall_s": wall, "bundles": [dict(b) for b in plan.bundles],
        "roles": plan.role_bundle, "cpu_sets": plan.cpu_sets, "pipeline_stages": plan.pipeline_stages,
        "policy_lag": plan.policy_lag, "offload": plan.offload,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument(
        "--repeats", type=int, default=3, help="interleaved rounds over all modes; medians reported"
    )
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--task", default="FrankaPickLift")
    parser.add_argument(
        "--epochs", type=int, default=1, help="PPO update epochs (RLinf's embodied PPO uses 1)"
    )
    parser.add_argument("--minibatches", type=int, default=2)
    parser.add_argument(
        "--no-pin", action="store_true", help="leave the workers unpinned (cluster.pin_cpus=false)"
    )
    parser.add_argument("--gpu", action="store_true", help="policy, rollout and actor on the GPU")
    parser.add_argument("--stages", type=int, default=2, help="env pipeline stages (Ray modes)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "placement.json")
    args = parser.parse_args()
    config, ppo_cfg = workload(args.num_envs, args.task, args.epochs, args.minibatches)
    device = "cuda" if args.gpu else "cpu"
    modes = {"sequential": lambda: run_sequential(config, ppo_cfg, args.iterations, device)}
    for mode in ("collocated", "collocated+offload", *PIPELINED) if args.gpu else MODES:
        cluster = cluster_for(mode, args.gpu, args.stages, not args.no_pin)
        modes[mode] = lambda cluster=cluster: run_ray(config, ppo_cfg, args.iterations, cluster)
    runs, results = interleaved_rounds(args.repeats, modes, args.out.with_suffix(".partial.json"))
    base = results["sequential"]["steps_per_s"]
    best = max(PIPELINED, key=lambda m: results[m]["steps_per_s"])
    ratio = results[best]["steps_per_s"] / base
    print(f"PPO {args.task}, 84 px CNN on the {device}, {args.num_envs} envs, {args.stages} stages, {args.epochs} "
          f"epoch(s) x {args.minibatches} minibatches; median of {args.repeats} interleaved rounds of {args.iterations} timed iterations")  # fmt: skip
    print("  mode            env steps/s  vs seq   wall s   per role: CPU s / in-call wall s (median round)")
    for mode, result in results.items():
        busy = ", ".join(f"{k} {v['cpu_s']:.1f}/{v['wall_s']:.1f}" for k, v in result["busy_s"].items())
        rounds = " ".join(f"{r['steps_per_s']:.0f}" for r in runs[mode])
        print(f"  {mode:14s} {result['steps_per_s']:12.1f}  {result['steps_per_s'] / base:5.2f}x  "
              f"{result['wall_s']:7.1f}   {busy}   [rounds: {rounds}]")  # fmt: skip
    print(f"best pipelined ({best}) / sequential: {ratio:.2f}x (target >= 1.6x)")
    payload = {
        "benchmark": "placement", "machine": platform.platform(), "cpus": os.cpu_count(),
        "device": device, "gpu": torch.cuda.get_device_name() if args.gpu else None, "stages": args.stages,
        "task": args.task, "num_envs": args.num_envs, "update_epochs": args.epochs, "minibatches": args.minibatches,
        "iterations": args.iterations, "repeats": args.repeats, "results": results, "rounds": runs,
        "best_pipelined": best, "ratio_vs_sequential": ratio,
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
