"""The world model on the CPU and on a GPU: training updates/s and imagined env steps/s.

A state world model of FrankaPickLift (``benchmarks/world_model.py``'s settings: hidden 256, 5
members, 10-step open-loop sequences, batch 64) is fitted for ``--updates`` updates from
``--episodes`` scripted episodes on each device, then ``rlinf/WorldModel-v0`` is stepped with random
one-step chunks at several batch sizes on each device; the sim's own rate (the inline vector env,
8 envs) is measured beside it. Where no GPU is there, the CPU rows still run.

    python benchmarks/world_model_device.py [--updates 300] [--envs 64 1024 8192] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sim_envs  # noqa: E402  (picks the headless GL backend first)
from policies.world_model.env import WorldModelVectorEnv  # noqa: E402
from trainer.expert_demos import DemoConfig, record_expert_demos  # noqa: E402
from trainer.world_model_training import WorldModelTrainConfig, train_world_model  # noqa: E402

ENV_ID = "rlinf/FrankaPickLift-v0"
STATE_ENV = {"cameras": [], "privileged_state": True, "action_rotation": False}


def imagined_rate(checkpoint: Path, envs: int, device: str, chunks: int) -> float:
    venv = WorldModelVectorEnv(str(checkpoint), envs, max_episode_steps=80, device=device, halt_multiple=0)
    dim = venv.spec.action.dim
    actions = np.random.default_rng(0).uniform(-1, 1, (chunks, envs, 1, dim)).astype(np.float32)
    venv.reset(seed=0)
    for chunk in actions[:3]:
        venv.chunk_step(chunk)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for chunk in actions:
        venv.chunk_step(chunk)  # returns numpy: each chunk ends synchronised
    return chunks * envs / (time.perf_counter() - start)


def sim_rate(steps: int) -> float:
    venv = sim_envs.make_vector(ENV_ID, 8, backend="inline", **STATE_ENV)
    dim = venv.spec.action.dim
    actions = np.random.default_rng(0).uniform(-1, 1, (steps // 8, 8, 1, dim)).astype(np.float32)
    venv.reset(seed=0)
    start = time.perf_counter()
    for chunk in actions:
        venv.chunk_step(chunk)
    rate = steps / (time.perf_counter() - start)
    venv.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=40, help="scripted episodes to fit on")
    parser.add_argument("--updates", type=int, default=300, help="training updates timed per device")
    parser.add_argument("--envs", type=int, nargs="+", default=[64, 1024, 8192])
    parser.add_argument("--chunks", type=int, default=50, help="one-step chunks timed per batch size")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "world_model_device.json"
    )
    args = parser.parse_args()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    spec = sim_envs.make(ENV_ID, **STATE_ENV).env_spec
    report: dict = {
        "task": f"{ENV_ID} state world model (hidden 256, 5 members, horizon 10, batch 64)",
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name(0) if "cuda" in devices else None,
        },
        "training_updates_per_s": {},
        "imagined_steps_per_s": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        demos = record_expert_demos(
            DemoConfig(
                ENV_ID, args.episodes, f"{tmp}/demos", seed=0, only_successful=False, env_kwargs=STATE_ENV
            ),
            progress=False,
        ).root
        for device in devices:
            cfg = WorldModelTrainConfig(dataset=str(demos), updates=args.updates, horizon=10, hidden=256)
            start = time.perf_counter()
            train_world_model(cfg, spec, Path(tmp) / device, device=device)
            wall = time.perf_counter() - start  # loading and validation included: a lower bound on the rate
            report["training_updates_per_s"][device] = args.updates / wall
            print(f"training on {device}: {args.updates / wall:.1f} updates/s", flush=True)
        checkpoint = Path(tmp) / devices[-1] / "world_model"
        for device in devices:
            rates = {n: imagined_rate(checkpoint, n, device, args.chunks) for n in args.envs}
            report["imagined_steps_per_s"][device] = rates
            print(
                f"imagined on {device}: " + ", ".join(f"{n} envs {r:,.0f}/s" for n, r in rates.items()),
                flush=True,
            )
    report["sim_steps_per_s_8_envs"] = sim_rate(800)
    print(f"sim (inline, 8 envs): {report['sim_steps_per_s_8_envs']:,.0f} steps/s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
