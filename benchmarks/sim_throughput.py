"""Sim throughput: env steps/s through the env interface against raw MuJoCo on the same scene.

For each task, with state only and with two 128x128 cameras, it times
  * the env: ``env.step(action)`` (validation, controller, reward, observation), and
  * raw MuJoCo: ``mj_step`` for the same physics substeps (+ the same two renders), replaying
    the exact controls the env produced, so both simulate the same motion,
and reports the medians of several repeats and their ratio (target: the env keeps >= 70 %).

    python benchmarks/sim_throughput.py [--steps 300] [--repeats 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import sim_envs  # first: it picks the headless GL backend before mujoco is imported
from sim_envs.rendering import make_renderer

TASKS = ("rlinf/FrankaReach-v0", "rlinf/FrankaPush-v0", "rlinf/FrankaPickLift-v0")


def _actions(env, steps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (steps, env.env_spec.action.dim)).astype(np.float32)


def time_env(env_id: str, cameras: tuple[str, ...], steps: int, seed: int = 0) -> float:
    env = sim_envs.make(env_id, cameras=cameras, image_height=128, image_width=128)
    actions = _actions(env, steps, seed)
    env.reset(seed=seed)
    env.step(actions[0])  # warm-up: creates the renderer
    env.reset(seed=seed)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def record_controls(env_id: str, steps: int, seed: int = 0) -> dict:
    import mujoco

    """Run the env once (untimed) and record what it fed MuJoCo, so raw MuJoCo replays the same motion."""
    env = sim_envs.make(env_id, cameras=())
    state_kind = mujoco.mjtState.mjSTATE_INTEGRATION
    size = mujoco.mj_stateSize(env.model, state_kind)
    resets, controls = {}, []

    def snapshot(step: int) -> None:
        state = np.empty(size)
        mujoco.mj_getState(env.model, env.data, state, state_kind)
        resets[step] = state

    env.reset(seed=seed)
    snapshot(0)
    for i, action in enumerate(_actions(env, steps, seed)):
        _, _, terminated, truncated, _ = env.step(action)
        controls.append((env.data.mocap_pos.copy(), env.data.mocap_quat.copy(), env.data.ctrl.copy()))
        if terminated or truncated:
            env.reset()
            snapshot(i + 1)
    return {"env": env, "resets": resets, "controls": controls, "state_kind": state_kind}


def time_raw(env_id: str, cameras: tuple[str, ...], steps: int, seed: int = 0) -> float:
    import mujoco

    recorded = record_controls(env_id, steps, seed)
    env = recorded["env"]
    model, data, substeps = env.model, env.data, env.cfg.substeps
    resets, controls, kind = recorded["resets"], recorded["controls"], recorded["state_kind"]
    renderer = make_renderer(model, 128, 128) if cameras else None
    start = time.perf_counter()
    for i, (mocap_pos, mocap_quat, ctrl) in enumerate(controls):
        if i in resets:
            mujoco.mj_setState(model, data, resets[i], kind)
        data.mocap_pos[:], data.mocap_quat[:], data.ctrl[:] = mocap_pos, mocap_quat, ctrl
        mujoco.mj_step(model, data, nstep=substeps)
        for cam in cameras:
            renderer.update_scene(data, camera=cam)
            renderer.render()
    rate = steps / (time.perf_counter() - start)
    if renderer is not None:
        renderer.close()
    env.close()
    return rate


def median_rate(fn, *args, repeats: int) -> float:
    return statistics.median(fn(*args) for _ in range(repeats))


def main() -> None:
    import mujoco

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).with_name("results") / "sim_throughput.json"
    )
    args = parser.parse_args()

    rows = []
    print(f"{'task':<26}{'obs':<10}{'env steps/s':>12}{'raw steps/s':>12}{'env/raw':>9}")
    for env_id in TASKS:
        for label, cameras in (("state", ()), ("2cam@128", ("front", "wrist"))):
            steps = args.steps if not cameras else max(50, args.steps // 3)
            env_rate = median_rate(time_env, env_id, cameras, steps, repeats=args.repeats)
            raw_rate = median_rate(time_raw, env_id, cameras, steps, repeats=args.repeats)
            ratio = env_rate / raw_rate
            rows.append(
                {
                    "env_id": env_id,
                    "obs": label,
                    "env_steps_per_s": env_rate,
                    "raw_steps_per_s": raw_rate,
                    "ratio": ratio,
                }
            )
            print(f"{env_id:<26}{label:<10}{env_rate:>12.1f}{raw_rate:>12.1f}{ratio:>9.2f}")
    result = {
        "benchmark": "sim_throughput",
        "target_ratio": 0.7,
        "min_ratio": min(r["ratio"] for r in rows),
        "gl_backend": __import__("os").environ.get("MUJOCO_GL"),
        "mujoco": mujoco.__version__,
        "machine": {
            "python": platform.python_version(),
            "processor": platform.processor(),
            "cpus": __import__("os").cpu_count(),
        },
        "repeats": args.repeats,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"min env/raw ratio {result['min_ratio']:.2f} (target >= 0.70); wrote {args.out}")


if __name__ == "__main__":
    main()
