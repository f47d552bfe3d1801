"""Off-policy on Ray: the same SAC workload run in this process and on Ray with the asynchronous
learner, in one run.

By default the envs are paced at 10 Hz (``real_time``), as real arms are: the case the async learner
is for (HIL-SERL's actor/learner split), where updates fit into the wait for the next control tick.
``--sim-speed`` steps the sim as fast as it goes, where a state-based SAC is learner-bound.

Each mode plays one warm-up iteration (it fills ``learning_starts``), then ``--iterations`` timed
iterations of one episode per env. Every mode makes the same number of gradient updates per env
step (checked and printed), so env steps/s compares like with like. Reported per mode: env steps/s,
the learner's wait at the end of an iteration, the mean policy lag (in updates) and each role's CPU
and in-call wall seconds.

    python benchmarks/off_policy_async.py [--sim-speed] [--obs state|image] [--repeats 3] [--iterations 2]
        [--num-envs 8] [--episode-steps 25] [--utd 0.5] [--out FILE]
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
from rounds import interleaved_rounds  # benchmarks/rounds.py, beside this script

import sim_envs
from policies import make_policy
from trainer.algorithms.sac import SAC
from trainer.configs import load_config
from trainer.configs.loader import algorithm_config
from trainer.distributed.config import ClusterConfig

MODES = ("collocated", "disaggregated", "hybrid", "learner-heavy")


def cluster_for(mode: str, cpus: float) -> ClusterConfig:
    """``learner-heavy``: disaggregated, but the learner's bundle holds 5/8 of the CPUs (env 1/4,
    rollout 1/8), for a learner-bound workload; the other modes are the defaults."""
    if mode == "learner-heavy":
        bundles = [{"CPU": cpus / 4}, {"CPU": cpus / 8}, {"CPU": cpus * 5 / 8}]
        return ClusterConfig(placement="disaggregated", bundles=bundles)
    return ClusterConfig(placement=mode)


def workload(obs: str, num_envs: int, utd: float, episode_steps: int, real_time: bool):
    """``image``: 84 px front camera + CNN (sac_reach_image); ``state``: proprioception + goal, MLPs."""
    if obs == "image":
        preset, kwargs = (
            "sac_reach_image",
            "cameras: [front], image_height: 84, image_width: 84, privileged_state: false",
        )
        nets = ["algo.batch_size=64"]
    else:
        preset, kwargs = "sac_reach", "cameras: []"
        nets = []
    config = load_config(preset, [
        f"env.num_envs={num_envs}",
        f"env.kwargs={{{kwargs}, action_rotation: false, max_episode_steps: {episode_steps}, "
        f"real_time: {str(real_time).lower()}}}",
        f"algo.utd_ratio={utd}", f"algo.learning_starts={num_envs * episode_steps}", "algo.buffer_capacity=20000",
        *nets,
    ])  # fmt: skip
    return config, algorithm_config(config)


def run_sequential(config, sac_cfg, iterations: int) -> dict:
    """The baseline: SAC in this process with every core for torch (``cluster.placement=sequential``)."""
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    venv = sim_envs.make_vector(config.env.id, config.env.num_envs, backend="inline", **config.env.kwargs)
    sac = SAC(make_policy(venv.spec, config.policy), sac_cfg)
    sac.iterate(venv, 0)  # warm-up: fills learning_starts
    updates0, cpu0 = _updates(sac), time.process_time()
    start, steps = time.perf_counter(), 0
    for i in range(1, iterations + 1):
        steps += sac.iterate(venv, i * 100).env_steps
    wall = time.perf_counter() - start
    venv.close()
    busy = {"all": {"wall_s": wall, "cpu_s": time.process_time() - cpu0}}
    return {"steps_per_s": steps / wall, "wall_s": wall, "updates_per_step": (_updates(sac) - updates0) / steps,
            "policy_lag": 0.0, "learner_wait_s": 0.0, "busy_s": busy}  # fmt: skip


def _updates(sac: SAC) -> float:
    """Gradient updates made so far (Adam's step count on the critic)."""
    state = sac.critic_optimizer.state_dict()["state"]
    return float(next(iter(state.values()))["step"]) if state else 0.0


def run_ray(mode: str, config, sac_cfg, iterations: int) -> dict:
    import ray

    from trainer.distributed.off_policy import RayOffPolicy
    from trainer.distributed.placement import plan_placement
    from trainer.distributed.session import local_cores

    resources = ray.cluster_resources()
    plan = plan_placement(cluster_for(mode, resources["CPU"]), resources, cores=local_cores())
    policy = make_policy(sim_envs.make(config.env.id, **config.env.kwargs).env_spec, config.policy)
    trainer = RayOffPolicy(plan, config, policy, sac_cfg)
    try:
        first = trainer.iterate(None, 0)  # warm-up
        busy0 = trainer.busy_seconds()
        start, steps, waits, lags, updates = time.perf_counter(), 0, [], [], first.metrics["updates"]
        for i in range(1, iterations + 1):
            result = trainer.iterate(None, i * 100)
            steps += result.env_steps
            waits.append(result.metrics["learner_wait_s"])
            lags.append(result.metrics["policy_lag"])
        wall = time.perf_counter() - start
        updates = result.metrics["updates"] - updates
        busy = {
            role: {key: value - busy0[role][key] for key, value in clock.items()}
            for role, clock in trainer.busy_seconds().items()
        }
    finally:
        trainer.close()
    return {"steps_per_s": steps / wall, "wall_s": wall, "updates_per_step": updates / steps,
            "policy_lag": statistics.mean(lags), "learner_wait_s": sum(waits), "busy_s": busy,
            "bundles": [dict(b) for b in plan.bundles], "roles": plan.role_bundle,
            "pipeline_stages": plan.pipeline_stages}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--obs", choices=("state", "image"), default="state")
    parser.add_argument(
        "--sim-speed",
        action="store_true",
        help="step the sim as fast as it goes (default: paced at 10 Hz, like real arms)",
    )
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; medians reported")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--episode-steps", type=int, default=25)
    parser.add_argument("--utd", type=float, default=0.5, help="gradient updates per env step")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "off_policy_async.json"
    )
    args = parser.parse_args()
    config, sac_cfg = workload(args.obs, args.num_envs, args.utd, args.episode_steps, not args.sim_speed)
    modes = {"sequential": lambda: run_sequential(config, sac_cfg, args.iterations)}
    for mode in MODES:
        modes[mode] = lambda mode=mode: run_ray(mode, config, sac_cfg, args.iterations)
    runs, results = interleaved_rounds(args.repeats, modes, args.out.with_suffix(".partial.json"))
    base = results["sequential"]["steps_per_s"]
    best = max(MODES, key=lambda m: results[m]["steps_per_s"])
    pace = "as fast as the sim goes" if args.sim_speed else "paced at 10 Hz like real arms"
    print(f"SAC FrankaReach, {args.obs} obs, {args.num_envs} envs x {args.episode_steps} steps {pace}, UTD {args.utd}; "
          f"median of {args.repeats} interleaved rounds of {args.iterations} timed iterations")  # fmt: skip
    print(
        "  mode           env steps/s  vs seq  updates/step  lag (updates)  learner wait s  per role: CPU s / wall s"
    )
    for mode, r in results.items():
        busy = ", ".join(f"{k} {v['cpu_s']:.1f}/{v['wall_s']:.1f}" for k, v in r["busy_s"].items())
        print(f"  {mode:14s} {r['steps_per_s']:11.1f}  {r['steps_per_s'] / base:5.2f}x  {r['updates_per_step']:12.3f}"
              f"  {r['policy_lag']:13.1f}  {r['learner_wait_s']:14.2f}  {busy}")  # fmt: skip
    print(f"best Ray mode ({best}) / sequential: {results[best]['steps_per_s'] / base:.2f}x")
    payload = {
        "benchmark": "off_policy_async", "machine": platform.platform(), "cpus": os.cpu_count(),
        "obs": args.obs, "real_time": not args.sim_speed,
        "num_envs": args.num_envs, "episode_steps": args.episode_steps, "utd_ratio": args.utd,
        "iterations": args.iterations, "repeats": args.repeats, "results": results, "rounds": runs,
        "best": best, "ratio_vs_sequential": results[best]["steps_per_s"] / base,
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
