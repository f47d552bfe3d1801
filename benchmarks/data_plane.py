"""The data plane on Ray: how many of an iteration's trajectory bytes pass through the driver, and
the iteration time, with trajectories going worker to worker (``cluster.data_plane=workers``,
the default) against the old path through the driver (``driver``), in one run.

Workloads (one node, the local Ray):
  * ``ppo_pick_lift_2x128``: PPO on FrankaPickLift with two 128 px cameras (front, wrist) and a CNN;
  * ``grpo_tiny_vla``: GRPO on FrankaPickColor with a ``tiny:openvla-oft`` VLA (64 px front camera).
Each in collocated, disaggregated and hybrid placement, each with both data planes; then, on a
local multi-node cluster (``ray.cluster_utils.Cluster``: a head that holds only the driver, two "sim
boxes" with an env stage each and a "GPU box" with the rollout and the actor, as
``tests/trainer/test_multinode.py`` lays it out), hybrid with both data planes. Per row:
``driver_bytes`` (array bytes the driver fetched per iteration, median), ``trajectory_bytes`` (the
iteration's batch), ``driver_share`` and ``iteration_s`` (median over the timed iterations, after a
warm-up one). The two data planes of a layout run in turn, ``--repeats`` times (driver, workers,
driver, ...), so that a slow stretch of this shared machine falls on both; the layout's ``speedup``
row holds the median of the repeats' driver / workers ratios and their range.

    python benchmarks/data_plane.py [--iterations 3] [--repeats 3] [--no-multinode] [--out benchmarks/results/data_plane.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainer.configs import load_config  # noqa: E402
from trainer.runner import Runner  # noqa: E402

PLACEMENTS = ("collocated", "disaggregated", "hybrid")
COMMON = ["run.eval_every=0", "run.final_eval_episodes=0", "run.checkpoint_every=1000", "run.video=false"]
WORKLOADS = {
    "ppo_pick_lift_2x128": ("ppo_pick_lift", [
        "env.num_envs=4", "env.backend=inline",
        "env.kwargs={cameras: [front, wrist], image_height: 128, image_width: 128, action_rotation: false, max_episode_steps: 20}",
        "policy.kind=cnn", "policy.cameras=[front, wrist]", "policy.hidden_sizes=[64]",
        "algo.update_epochs=1", "algo.num_minibatches=2",
    ]),
    "grpo_tiny_vla": ("vla_grpo_pick_color", [
        "env.num_envs=8", "env.kwargs.max_episode_steps=16", "algo.group_size=4", "algo.update_epochs=1",
        "algo.num_minibatches=2",
    ]),
}  # fmt: skip


MIB = 1 << 20
MULTINODE = [
    "cluster.pipeline_stages=2",
    "cluster.bundles=[{CPU: 1, sim_box_1: 1}, {CPU: 1, sim_box_2: 1}, {CPU: 1, gpu_box: 1}]",
    "cluster.roles={env: [0, 1], rollout: 2, actor: 2}",
]


def local_cluster():
    """Four raylets on this host: the driver's head (no CPUs: nothing else runs there) and three workers."""
    from ray.cluster_utils import Cluster

    store = {"object_store_memory": 300 * MIB}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, **store})
    for resource in ("sim_box_1", "sim_box_2", "gpu_box"):
        cluster.add_node(num_cpus=1, resources={resource: 1}, **store)
    cluster.wait_for_nodes()
    return cluster


def one_row(
    preset: str, overrides: list[str], placement: str, plane: str, iterations: int, env_steps: int
) -> dict:
    # A run's files (~70 MB, checkpoints included) go once its metrics are read.
    with tempfile.TemporaryDirectory(prefix="rlinf-data-plane-", ignore_cleanup_errors=True) as out:
        config = load_config(preset, [*overrides, *COMMON, f"cluster.placement={placement}",
                                      f"cluster.data_plane={plane}", f"run.total_env_steps={env_steps * (iterations + 1)}",
                                      f"run.output_dir={out}"])  # fmt: skip
        Runner(config).run()
        rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    walls = [b["wall_s"] - a["wall_s"] for a, b in itertools.pairwise(rows)]  # the first iteration warms up
    driver = statistics.median(r["train/driver_bytes"] for r in rows[1:])
    trajectory = statistics.median(r["train/trajectory_bytes"] for r in rows[1:])
    return {"placement": placement, "data_plane": plane, "iterations_timed": len(walls),
            "driver_bytes": int(driver), "trajectory_bytes": int(trajectory),
            "driver_share": round(driver / trajectory, 6), "iteration_s": round(statistics.median(walls), 3)}  # fmt: skip


def measure_pair(results, name, label, preset, overrides, placement, iterations, env_steps, repeats) -> None:
    runs: dict[str, list[dict]] = {"driver": [], "workers": []}
    for _ in range(repeats):
        for plane in ("driver", "workers"):
            row = one_row(preset, overrides, placement, plane, iterations, env_steps)
            runs[plane].append(row)
            print(f"{name:>20} {label:>16} {plane:>7}: driver {row['driver_bytes'] / MIB:8.2f} MiB of "
                  f"{row['trajectory_bytes'] / MIB:8.2f} MiB ({row['driver_share']:.2%}), "
                  f"{row['iteration_s']:.2f} s/iteration", flush=True)  # fmt: skip
    for plane, rows in runs.items():
        row = dict(rows[0])
        row["iteration_s"] = round(statistics.median(r["iteration_s"] for r in rows), 3)
        row["driver_bytes"] = int(statistics.median(r["driver_bytes"] for r in rows))
        row["driver_share"] = round(row["driver_bytes"] / row["trajectory_bytes"], 6)
        row["repeats"] = len(rows)
        results["rows"][f"{name}/{label}/{plane}"] = row
    ratios = [d["iteration_s"] / w["iteration_s"] for d, w in zip(runs["driver"], runs["workers"])]
    results["rows"][f"{name}/{label}/speedup"] = {
        "driver_over_workers_iteration_s": round(statistics.median(ratios), 3),
        "range": [round(min(ratios), 3), round(max(ratios), 3)],
        "repeats": len(ratios),
    }
    print(f"{name:>20} {label:>16} driver / workers: median {statistics.median(ratios):.3f} "
          f"({min(ratios):.3f} .. {max(ratios):.3f})", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--iterations", type=int, default=3, help="timed iterations per row (after one warm-up)"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of each data plane per layout, taken in turn"
    )
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--no-multinode", action="store_true", help="one node only")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "data_plane.json")
    args = parser.parse_args()
    from trainer.distributed.session import start_local_ray

    start_local_ray(num_cpus=None)
    results: dict = {"benchmark": "data_plane", "node": "one node (local Ray, 2 cores)", "rows": {}}
    layouts = [(placement, placement, []) for placement in PLACEMENTS]
    for name in args.workloads:
        preset, overrides = WORKLOADS[name]
        probe = load_config(preset, [*overrides, *COMMON])
        env_steps = probe.env.num_envs * probe.env.kwargs["max_episode_steps"]
        for label, placement, extra in layouts:
            measure_pair(results, name, label, preset, [*overrides, *extra], placement, args.iterations,
                         env_steps, args.repeats)  # fmt: skip
    if not args.no_multinode:
        import ray

        ray.shutdown()
        cluster = local_cluster()
        try:
            for name in args.workloads:
                preset, overrides = WORKLOADS[name]
                probe = load_config(preset, [*overrides, *COMMON])
                env_steps = probe.env.num_envs * probe.env.kwargs["max_episode_steps"]
                extra = [*MULTINODE, f"cluster.ray_address={cluster.address}"]
                measure_pair(results, name, "multinode_hybrid", preset, [*overrides, *extra], "hybrid",
                             args.iterations, env_steps, args.repeats)  # fmt: skip
        finally:
            ray.shutdown()
            cluster.shutdown()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.out.exists():  # keep the rows other benchmarks wrote there (dynamic_schedule.py's "dynamic")
        earlier = json.loads(args.out.read_text()).get("rows", {})
        results["rows"].update({k: v for k, v in earlier.items() if k not in results["rows"]})
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
