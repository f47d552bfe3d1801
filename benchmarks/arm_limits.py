"""The arm's limits on the *measured* state: does the TCP stay in the box under hostile but valid actions?

The sim twin (MuJoCo Franka, reality-gap randomisation) is driven exactly as the agent's control loop
drives a robot: observe -> ``SafetyFilter.limit`` -> ``driver.apply``. Three action streams, each a
valid chunk the trainer could send:
  * random:    uniform in [-1, 1] on every dim, every step;
  * saturated: every dim at +-1, the signs redrawn every 25 steps (pushes into walls and corners);
  * wall:      full speed straight at one face of the box (each face in turn), rotation saturated.

Reported per stream and overall: the measured TCP's worst excursion beyond the box (mm), its worst
move in one step (mm, against ``max_translation_m``), the commanded-vs-measured orientation error
at each command and the turn from the episode's first orientation (degrees, against their bounds).
Target (issue 23): 0 mm beyond the box plus the brake distance. The brake distance is stated as the
distance the TCP covers in one control period at its fastest (``max_target_lead_m``): the filter
sees a crossing one observation late and pulls the target back from there.
Before the fix (issue 23's review): 31.6 mm outside the box, 26.2 mm moved in one 20 mm step.

    python benchmarks/arm_limits.py [--episodes 8] [--steps 300] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from protos.pose_math import matrix_to_rotvec, quat_to_matrix  # noqa: E402
from robot_agent.drivers.sim_twin import SimTwinConfig, SimTwinDriver  # noqa: E402
from robot_agent.safety import SafetyConfig, SafetyFilter  # noqa: E402

STREAMS = ("random", "saturated", "wall")


def angle_between(quat_a: np.ndarray, quat_b: np.ndarray) -> float:
    return float(np.linalg.norm(matrix_to_rotvec(quat_to_matrix(quat_a) @ quat_to_matrix(quat_b).T)))


def action_stream(stream: str, rng: np.random.Generator, dim: int, episode: int):
    """Yields one action per step for ``stream``."""
    held = rng.choice([-1.0, 1.0], dim)
    step = 0
    while True:
        if stream == "random":
            action = rng.uniform(-1.0, 1.0, dim)
        elif stream == "saturated":
            if step % 25 == 0:
                held = rng.choice([-1.0, 1.0], dim)
            action = held
        else:  # one face per episode: +-x, +-y, +-z, at full speed, rotating at full rate too
            action = np.zeros(dim)
            action[(episode // 2) % 3] = 1.0 if episode % 2 == 0 else -1.0
            action[3:6] = held[3:6]
            action[-1] = held[-1]
        step += 1
        yield action.astype(np.float32)


def run_episode(driver: SimTwinDriver, config: SafetyConfig, stream: str, seed: int, steps: int) -> dict:
    safety = SafetyFilter(driver.spec, driver.arms, config)
    fields = driver.spec.state_slices()
    low, high = np.asarray(config.workspace_low), np.asarray(config.workspace_high)
    driver.reset(seed=seed)
    safety.begin_episode()
    actions = action_stream(stream, np.random.default_rng(seed), driver.spec.action.dim, seed)
    excursions, moves, rotation_leads, turns = [], [], [], []
    previous, last_safe, start_quat, unstable = None, None, None, False
    for _ in range(steps):
        state = driver.observe().state
        position = state[fields["tcp_pos"]].astype(np.float64)
        quat = state[fields["tcp_quat"]].astype(np.float64)
        start_quat = quat if start_quat is None else start_quat
        excursions.append(float(np.linalg.norm(np.maximum(0.0, np.maximum(low - position, position - high)))))
        turns.append(angle_between(quat, start_quat))
        if previous is not None:
            moves.append(float(np.linalg.norm(position - previous)))
        previous = position
        safe, _ = safety.limit(next(actions), state, last_safe, driver.tcp_targets())
        outcome = driver.apply(safe)
        last_safe = safe
        rotation_leads.append(angle_between(driver.tcp_targets()[0].quat, quat))
        if outcome.truncated:  # MuJoCo went unstable: the agent ends the episode here, so do we
            unstable = True
            break
    return {
        "unstable": unstable,
        "excursion_mm": 1000 * np.asarray(excursions),
        "move_mm": 1000 * np.asarray(moves),
        "rotation_lead_deg": np.degrees(rotation_leads),
        "turn_deg": np.degrees(turns),
    }


def summarise(samples: list[dict]) -> dict:
    merged = {key: np.concatenate([s[key] for s in samples]) for key in samples[0] if key != "unstable"}
    return {
        "episodes_ended_unstable": sum(s["unstable"] for s in samples),
        "worst_excursion_mm": round(float(merged["excursion_mm"].max()), 1),
        "p99_excursion_mm": round(float(np.percentile(merged["excursion_mm"], 99)), 1),
        "steps_outside_box_pct": round(100 * float((merged["excursion_mm"] > 0).mean()), 2),
        "worst_move_mm": round(float(merged["move_mm"].max()), 1),
        "median_move_mm": round(float(np.median(merged["move_mm"])), 1),
        "worst_rotation_lead_deg": round(float(merged["rotation_lead_deg"].max()), 1),
        "worst_turn_from_start_deg": round(float(merged["turn_deg"].max()), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=8, help="episodes per action stream")
    parser.add_argument("--steps", type=int, default=300, help="control steps per episode (10 Hz)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "arm_limits.json")
    args = parser.parse_args()

    driver = SimTwinDriver(SimTwinConfig(cameras=()))
    config = SafetyConfig().for_embodiment(driver.embodiment)  # the twin's arm's own box
    results: dict = {
        "benchmark": "arm_limits",
        "safety": {
            "workspace_low": config.workspace_low,
            "workspace_high": config.workspace_high,
            "max_translation_m": config.max_translation_m,
            "max_target_lead_m": config.max_target_lead_m,
            "max_rotation_lead_rad": config.max_rotation_lead_rad,
            "max_orientation_change_rad": config.max_orientation_change_rad,
        },
        "brake_distance_mm": 1000 * config.max_target_lead_m,
        "episodes_per_stream": args.episodes,
        "steps_per_episode": args.steps,
        "streams": {},
    }
    started = time.perf_counter()
    every = []
    for stream in STREAMS:
        samples = [run_episode(driver, config, stream, seed, args.steps) for seed in range(args.episodes)]
        every += samples
        results["streams"][stream] = summarise(samples)
        print(f"{stream:>10}: {results['streams'][stream]}", flush=True)
    driver.close()
    results["overall"] = summarise(every)
    worst = results["overall"]["worst_excursion_mm"]
    results["target_met"] = worst <= results["brake_distance_mm"]
    results["seconds"] = round(time.perf_counter() - started, 1)
    print(
        f"worst excursion beyond the box {worst} mm (brake distance {results['brake_distance_mm']:.0f} mm); "
        f"worst move in one step {results['overall']['worst_move_mm']} mm "
        f"(limit {1000 * config.max_translation_m:.0f} mm)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
