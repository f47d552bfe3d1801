"""Dynamic scheduling on a workload whose bottleneck moves: ``cluster.schedule=dynamic`` against the
best static placement that today's auto-scheduler chooses, in one run.

The workload: PPO on FrankaPickLift with an 84 px camera and a CNN (``benchmarks/placement.py``'s),
``--epochs`` update epochs. For its first ``--phase-iterations`` iterations the env is cheap and the
update dominates; then the env gets ``--costlier``x costlier (MuJoCo steps ``--costlier`` times as
finely, as a contact-rich phase needs: ``physics_dt`` divided) for as many iterations, and the envs
dominate. ``auto`` profiles collocated, disaggregated and hybrid in the first phase's conditions and
keeps the fastest: the static run. The dynamic run starts from the same placement (hybrid if auto
chose collocated, whose roles take turns and have nothing to move) with ``cluster.schedule=dynamic``.
Throughput is env steps over the wall clock of both phases (after one warm-up iteration, the env
change included). The result is the row ``dynamic`` of ``benchmarks/results/data_plane.json``.

    python benchmarks/dynamic_schedule.py [--phase-iterations 3] [--num-envs 8] [--epochs 4] [--costlier 25] [--static MODE]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from dataclasses import replace
from pathlib import Path

from placement import workload  # benchmarks/placement.py, beside this script

import sim_envs
from policies import make_policy
from trainer.distributed.config import ClusterConfig
from trainer.distributed.session import build_distributed, choose_placement, start_local_ray

OUT = Path(__file__).parent / "results" / "data_plane.json"


def run(config, ppo_cfg, policy, phase_iterations: int, costly_kwargs: dict) -> dict:
    trainer = build_distributed(config, copy.deepcopy(policy), ppo_cfg)
    stages = []
    try:
        trainer.iterate(None, 0)  # warm-up
        start, steps = time.perf_counter(), 0
        for i in range(1, 2 * phase_iterations + 1):
            if i == phase_iterations + 1:
                trainer.reconfigure_envs(costly_kwargs)
            result = trainer.iterate(None, i * 100)
            if trainer.scheduler is not None:
                print(
                    f"  iteration {i}: demand { ({k: round(v, 2) for k, v in trainer.scheduler.demand.items()}) }",
                    flush=True,
                )
            steps += result.env_steps
            stages.append(result.metrics.get("env_stages", float(trainer.stages)))
        trainer.flush()  # the last update is inside the timed window
        wall = time.perf_counter() - start
        changes = trainer.scheduler.changes if trainer.scheduler is not None else 0
        final = trainer.schedule.describe() if trainer.schedule is not None else None
    finally:
        trainer.close()
    return {"env_steps_per_s": round(steps / wall, 2), "wall_s": round(wall, 2), "env_steps": steps,
            "schedule_changes": changes, "env_stages_per_iteration": stages, "final_schedule": final}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phase-iterations", type=int, default=3)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument(
        "--costlier", type=int, default=25, help="how many times finer MuJoCo steps in phase 2"
    )
    parser.add_argument("--static", choices=("collocated", "disaggregated", "hybrid"),
                        help="skip the auto profile and compare against this placement")  # fmt: skip
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    base, ppo_cfg = workload(args.num_envs, "FrankaPickLift", args.epochs, 2)
    env = sim_envs.make(base.env.id, **base.env.kwargs)
    policy = make_policy(env.env_spec, base.policy)
    physics_dt = env.cfg.physics_dt
    costly = {**base.env.kwargs, "physics_dt": physics_dt / args.costlier}
    start_local_ray(num_cpus=None)
    cluster = ClusterConfig(placement="auto", pipeline_stages=2)
    chosen = args.static or choose_placement(replace(base, cluster=cluster), policy, ppo_cfg)
    dynamic_mode = "hybrid" if chosen == "collocated" else chosen
    static = run(replace(base, cluster=replace(cluster, placement=chosen)), ppo_cfg, policy,
                 args.phase_iterations, costly)  # fmt: skip
    print(
        f"static {chosen}: {static['env_steps_per_s']:.1f} env steps/s ({static['wall_s']:.1f} s)", flush=True
    )
    dynamic_cluster = replace(cluster, placement=dynamic_mode, schedule="dynamic", replan_every=1)
    dynamic = run(replace(base, cluster=dynamic_cluster), ppo_cfg, policy, args.phase_iterations, costly)
    ratio = dynamic["env_steps_per_s"] / static["env_steps_per_s"]
    print(f"dynamic {dynamic_mode}: {dynamic['env_steps_per_s']:.1f} env steps/s ({dynamic['wall_s']:.1f} s), "
          f"{dynamic['schedule_changes']} re-plans, stages {dynamic['env_stages_per_iteration']}")  # fmt: skip
    print(f"dynamic / best static: {ratio:.3f}x")
    results = (
        json.loads(args.out.read_text()) if args.out.exists() else {"benchmark": "data_plane", "rows": {}}
    )
    results["rows"]["dynamic"] = {
        "workload": f"PPO FrankaPickLift 84 px CNN, {args.num_envs} envs, {args.epochs} epochs; "
        f"{args.phase_iterations} iterations, then the env {args.costlier}x costlier for {args.phase_iterations}",
        "static_placement": chosen, "dynamic_placement": dynamic_mode, "static": static, "dynamic": dynamic,
        "throughput_ratio": round(ratio, 3), "cores": len(__import__("os").sched_getaffinity(0)),
    }  # fmt: skip
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
