"""ManiSkill3 on SAPIEN's GPU physics: ``rlinf/ManiSkillGPU-v0`` against ManiSkill raw, in one run.

* **Raw**: ManiSkill's own GPU vector env (``ManiSkillVectorEnv``: auto-reset, observations left on
  the GPU as torch tensors), stepped with torch actions already on the GPU.
* **Ours**: :class:`~sim_envs.adapters.maniskill_gpu.ManiSkillGPUVectorEnv`'s ``chunk_step`` with
  numpy actions, observations back as numpy (what our policies take), episode accounting, final
  observations kept.

Both are built once per size and timed in alternating rounds; medians and the ratio (target: ours
keeps >= 85 % of raw). Then PPO (``ppo_maniskill_gpu``) on PushCube for ``--ppo-minutes``: success
against wall time. Needs a CUDA GPU and ManiSkill importable (``pip install -e .[train,maniskill]``).

    python benchmarks/maniskill_gpu.py --out benchmarks/results/maniskill_gpu.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def raw_env(task: str, n: int, obs_mode: str, image_size: int, backend: str):
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401
    from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv

    options = {"obs_mode": obs_mode, "num_envs": n, "sim_backend": backend}
    if obs_mode == "rgb":
        options["sensor_configs"] = {"width": image_size, "height": image_size}
    return ManiSkillVectorEnv(gym.make(task, **options), auto_reset=True)


def our_env(task: str, n: int, obs_mode: str, image_size: int, backend: str):
    import sim_envs

    return sim_envs.make_vector(
        "rlinf/ManiSkillGPU-v0", n, task=task, obs_mode=obs_mode, image_size=image_size, sim_backend=backend
    )


def time_raw(env, steps: int, rng: np.random.Generator) -> float:
    import torch

    dim = env.single_action_space.shape[0]
    actions = torch.as_tensor(
        rng.uniform(-1, 1, (steps, env.num_envs, dim)), dtype=torch.float32, device=env.device
    )
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    start = time.perf_counter()
    for t in range(steps):
        env.step(actions[t])
    sync()
    return env.num_envs * steps / (time.perf_counter() - start)


def time_ours(venv, steps: int, rng: np.random.Generator) -> float:
    actions = rng.uniform(-1, 1, (venv.num_envs, steps, venv.spec.action.dim)).astype(np.float32)
    start = time.perf_counter()
    venv.chunk_step(actions)  # one chunk of `steps`: the per-step path, observations out once at the end
    return venv.num_envs * steps / (time.perf_counter() - start)


def time_ours_per_step(venv, steps: int, rng: np.random.Generator) -> float:
    actions = rng.uniform(-1, 1, (steps, venv.num_envs, venv.spec.action.dim)).astype(np.float32)
    start = time.perf_counter()
    for t in range(steps):
        venv.step(actions[t])  # a policy's loop: numpy observations out after every step
    return venv.num_envs * steps / (time.perf_counter() - start)


def compare(task: str, n: int, obs_mode: str, image_size: int, steps: int, rounds: int, backend: str) -> dict:
    rng = np.random.default_rng(0)
    raw, ours = (
        raw_env(task, n, obs_mode, image_size, backend),
        our_env(task, n, obs_mode, image_size, backend),
    )
    try:
        raw.reset(seed=0)
        ours.reset(seed=0)
        time_raw(raw, 5, rng), time_ours_per_step(ours, 5, rng)  # warm-up (kernels, first renders)
        rates: dict[str, list[float]] = {"raw": [], "ours_per_step": [], "ours_chunk": []}
        for _ in range(rounds):
            rates["raw"].append(time_raw(raw, steps, rng))
            rates["ours_per_step"].append(time_ours_per_step(ours, steps, rng))
            rates["ours_chunk"].append(time_ours(ours, steps, rng))
    finally:
        raw.close()
        ours.close()
    med = {k: statistics.median(v) for k, v in rates.items()}
    row = {"task": task, "num_envs": n, "obs_mode": obs_mode, "image_size": image_size if obs_mode == "rgb" else 0,
           "steps_per_round": steps, "rounds": rounds, "steps_per_s": rates, "median_steps_per_s": med,
           "ratio_per_step": med["ours_per_step"] / med["raw"], "ratio_chunk": med["ours_chunk"] / med["raw"]}  # fmt: skip
    print(f"{task} {obs_mode:5s} N={n:5d}: raw {med['raw']:10.0f}  ours per step {med['ours_per_step']:10.0f} "
          f"({row['ratio_per_step']:.2f})  ours chunk {med['ours_chunk']:10.0f} ({row['ratio_chunk']:.2f}) steps/s",
          flush=True)  # fmt: skip
    return row


def ppo_curve(minutes: float, num_envs: int, work: Path, backend: str) -> dict:
    from trainer.configs import load_config
    from trainer.runner import Runner

    shutil.rmtree(work, ignore_errors=True)
    overrides = [f"run.output_dir={work}", f"run.max_wall_minutes={minutes}", "run.total_env_steps=100000000",
                 f"env.num_envs={num_envs}", "run.eval_every=0", f"run.final_eval_episodes={min(128, num_envs)}",
                 f"env.kwargs.sim_backend={backend}"]  # fmt: skip
    Runner(load_config("ppo_maniskill_gpu", overrides)).run()
    rows = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    final = json.loads((work / "final_eval.json").read_text())
    return {
        "config": "ppo_maniskill_gpu", "num_envs": num_envs, "minutes": minutes,
        "curve": [{k: r.get(k) for k in ("wall_s", "env_steps", "return_mean", "success_rate", "steps_per_s")}
                  for r in rows],
        "final_eval": {k: final[k] for k in ("success_rate", "return_mean", "episodes", "env_steps")},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="PushCube-v1")
    parser.add_argument("--state-envs", type=int, nargs="*", default=[256, 1024, 4096])
    parser.add_argument("--rgb-envs", type=int, nargs="*", default=[64, 256])
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ppo-minutes", type=float, default=3.0)
    parser.add_argument("--ppo-envs", type=int, default=512)
    parser.add_argument("--work", default="runs/bench-maniskill-gpu")
    parser.add_argument("--out", default=str(RESULTS / "maniskill_gpu.json"))
    # physx_cpu (one env) only smoke-tests this script on a machine without a GPU.
    parser.add_argument("--sim-backend", default="physx_cuda", help=argparse.SUPPRESS)
    args = parser.parse_args()

    import torch

    if args.sim_backend == "physx_cuda" and not torch.cuda.is_available():
        raise SystemExit("benchmarks/maniskill_gpu.py needs a CUDA GPU (SAPIEN's physx_cuda)")
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    report: dict = {"device": device, "sim_backend": args.sim_backend, "task": args.task, "rates": []}
    for n in args.state_envs:
        report["rates"].append(
            compare(args.task, n, "state", args.image_size, args.steps, args.rounds, args.sim_backend)
        )
    for n in args.rgb_envs:
        steps = max(10, args.steps // 4)
        report["rates"].append(
            compare(args.task, n, "rgb", args.image_size, steps, args.rounds, args.sim_backend)
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")  # the rates survive a PPO failure
    if args.ppo_minutes > 0:
        report["ppo"] = ppo_curve(args.ppo_minutes, args.ppo_envs, Path(args.work), args.sim_backend)
        final = report["ppo"]["final_eval"]
        print(f"PPO {args.ppo_minutes} min, {args.ppo_envs} envs: success {final['success_rate']:.2f} "
              f"after {final['env_steps']} env steps", flush=True)  # fmt: skip
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
