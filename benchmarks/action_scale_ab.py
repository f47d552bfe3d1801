"""PPO under the robot's limits with three action scales: does matching the scale to the agent's caps help?

The sim_to_real nominal arm (PickLift, state, ``--sim-robot-limits``), ``--minutes`` of PPO per run:

* ``scale_0.05``: a full action moves the arm 0.05 m / 0.3 rad (the default); the limits cut each
  step to 0.03 m / 0.2 rad, so the outer 40 % of each translation axis does nothing.
* ``scale_0.03``: a full action is the caps (``--action-scale-at-limits``); the policy's exploration
  noise (``policy.init_log_std`` -0.5, in action units) then moves the arm 40 % less.
* ``scale_0.03_noise_matched``: the caps, with the initial noise scaled up by 0.05 / 0.03, so it
  moves the arm as much as at the default scale.

Per run: wall time and env steps to the first iteration with training success >= 0.2 and >= 0.5,
the mean training success of the last 10 iterations, and the final greedy evaluation (10 episodes).

    python benchmarks/action_scale_ab.py [--seeds 0,1,2] [--minutes 5] [--arms scale_0.05,...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
from pathlib import Path

from sim_to_real import SIM_KWARGS, action_scale, noise_matched_to_scale, robot_limits

RESULTS = Path(__file__).resolve().parent / "results"
CAPS = tuple(action_scale(at_limits=True).values())  # the agent's step caps: metres, radians
ARMS = {
    "scale_0.05": {},
    "scale_0.03": {"scale": CAPS},
    "scale_0.03_noise_matched": {
        "scale": CAPS,
        "init_log_std": noise_matched_to_scale(CAPS[0]),
    },
}


def overrides(arm: str, seed: int, minutes: float, out: Path) -> list[str]:
    setting = ARMS[arm]
    kwargs = f"{SIM_KWARGS}, {robot_limits()}"
    if "scale" in setting:
        kwargs += f", max_translation_m: {setting['scale'][0]}, max_rotation_rad: {setting['scale'][1]}"
    found = [f"env.kwargs={{{kwargs}}}", f"run.max_wall_minutes={minutes}", "run.total_env_steps=100000000",
             "run.eval_every=0", f"run.seed={seed}", f"run.output_dir={out}"]  # fmt: skip
    if "init_log_std" in setting:
        found.append(f"policy.init_log_std={setting['init_log_std']:.4f}")
    return found


def first_reaching(rows: list[dict], level: float) -> dict | None:
    for row in rows:
        if row.get("success_rate", 0.0) >= level:
            return {"wall_s": round(row["wall_s"], 1), "env_steps": row["env_steps"]}
    return None


def run_one(arm: str, seed: int, minutes: float, work: Path) -> dict:
    from trainer.configs.loader import load_config
    from trainer.runner import Runner

    out = work / f"{arm}-{seed}"
    shutil.rmtree(out, ignore_errors=True)  # a run directory with checkpoints would be resumed
    Runner(load_config("ppo_pick_lift", overrides(arm, seed, minutes, out))).run()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "success_rate" in r]
    final = json.loads((out / "final_eval.json").read_text())
    return {
        "arm": arm,
        "seed": seed,
        "first_train_success_0.2": first_reaching(rows, 0.2),
        "first_train_success_0.5": first_reaching(rows, 0.5),
        "last_10_train_success": round(
            sum(r["success_rate"] for r in rows[-10:]) / max(1, len(rows[-10:])), 3
        ),
        "final_eval_success_10_episodes": final["success_rate"],
        "env_steps": rows[-1]["env_steps"] if rows else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    parser.add_argument("--work", type=Path, default=Path("runs/action-scale-ab"))
    parser.add_argument("--out", type=Path, default=RESULTS / "action_scale_ab.json")
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        parser.error(f"unknown arm(s) {unknown}; known: {', '.join(ARMS)}")
    runs = []
    # Seed by seed, every arm within a seed: a drift in the machine's speed lands on every arm alike.
    for seed in (int(s) for s in args.seeds.split(",")):
        for arm in arms:
            row = run_one(arm, seed, args.minutes, args.work)
            runs.append(row)
            half = row["first_train_success_0.5"]
            print(f"seed {seed} {arm:26s} to 0.5: {half['wall_s'] if half else 'never':>6} s  "
                  f"last-10 train {row['last_10_train_success']:.2f}  "
                  f"final eval {row['final_eval_success_10_episodes']:.2f}", flush=True)  # fmt: skip
    result = {
        "benchmark": "action_scale_ab",
        "what": __doc__.split("\n\n")[0],
        "arms": {arm: ARMS[arm] for arm in arms},
        "minutes": args.minutes,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
