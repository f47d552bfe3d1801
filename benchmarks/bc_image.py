"""Image behaviour cloning on FrankaReach: does the CNN read the goal from the recorded camera?

The goal is not in the state (``privileged_state=false``), only in the 64 px front camera, as a small
green dot. ``--demos`` scripted episodes are recorded as a LeRobot v3 dataset (mp4, yuv444p at crf 0),
then two policies are fitted on it with the same BC code (`trainer/algorithms/bc.py`):

* ``cnn``: the front camera plus proprioception (what `--config bc_reach_image` trains);
* ``state``: proprioception only, the control. It can only learn the average goal.

Every ``--eval-every`` updates both are scored greedily on ``--eval-episodes`` held-out seeds (goals
the demonstrations never showed). A third fit of the CNN on a yuv420p copy of the same dataset
(LeRobot's default pixel format, which loses the goal dot's colour) shows whether that matters.

    python benchmarks/bc_image.py [--demos 32] [--updates 1500] [--eval-every 250] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import sim_envs
from policies import PolicyConfig, make_policy
from protos.lerobot_dataset import EpisodeFrames, LeRobotWriter, VideoFormat
from sim_envs.scripted import play_expert
from trainer.algorithms.bc import BC, BCConfig

RESULTS = Path(__file__).resolve().parent / "results"
ENV = {"cameras": ["front"], "image_height": 64, "image_width": 64, "privileged_state": False,
       "action_rotation": False, "max_episode_steps": 40}  # fmt: skip
POLICIES = {
    "cnn": PolicyConfig(kind="cnn", cameras=["front"], activation="relu", value_head=False),
    "state": PolicyConfig(value_head=False),
}


def record(roots: dict[str, VideoFormat], demos: int) -> float:
    """The same scripted episodes into one dataset per video format; returns the expert's success."""
    env = sim_envs.make("rlinf/FrankaReach-v0", **ENV)
    writers = {
        name: LeRobotWriter(root, env.env_spec.control_hz, video=fmt) for name, (root, fmt) in roots.items()
    }
    successes = []
    for episode in tqdm(range(demos), desc="recording demos"):
        played = play_expert(env, seed=10_000 + episode)
        successes.append(played.success)
        frames = EpisodeFrames(
            task="reach",
            images=played.images,
            vectors={"observation.state": played.states, "action": played.actions},
        )
        for writer in writers.values():
            writer.add_episode(frames)
    env.close()
    return float(np.mean(successes))


def score(bc: BC, venv, seeds: int) -> dict[str, float]:
    episodes = []
    for start in range(0, seeds, venv.num_envs):
        episodes += bc.play_greedy(venv, seed=start)[1]
    return {
        "success_rate": float(np.mean([e.success for e in episodes])),
        "return_mean": float(np.mean([e.episode_return for e in episodes])),
    }


def fit_and_score(name: str, policy_cfg: PolicyConfig, dataset: Path, args) -> list[dict]:
    torch.manual_seed(args.seed)
    venv = sim_envs.make_vector("rlinf/FrankaReach-v0", 8, backend="inline", **ENV)
    cfg = BCConfig(dataset=str(dataset), learning_rate=3e-4, batch_size=64, image_shift=0)
    bc = BC(make_policy(venv.spec, policy_cfg), cfg)
    curve = [{"updates": 0, **score(bc, venv, args.eval_episodes)}]
    started = time.monotonic()
    for done in tqdm(range(args.eval_every, args.updates + 1, args.eval_every), desc=name):
        loss = bc.regression.fit(args.eval_every)
        curve.append({"updates": done, "bc_mse": loss, **score(bc, venv, args.eval_episodes),
                      "fit_wall_s": time.monotonic() - started})  # fmt: skip
        print(f"{name:>12} {done:5d} updates  mse {loss:.4f}  held-out success {curve[-1]['success_rate']:.2f}  "
              f"return {curve[-1]['return_mean']:.1f}", flush=True)  # fmt: skip
    venv.close()
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--demos", type=int, default=32)
    parser.add_argument("--updates", type=int, default=1500)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--eval-episodes", type=int, default=24, help="held-out seeds, a multiple of 8")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("runs/bench-bc-image"))
    parser.add_argument("--out", type=Path, default=RESULTS / "bc_image.json")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    started = time.monotonic()
    roots = {
        "yuv444p": (args.work / "demos", VideoFormat.lossless()),
        "yuv420p": (args.work / "demos-420", VideoFormat()),
    }
    expert_success = record(roots, args.demos)
    curves = {
        "cnn": fit_and_score("cnn", POLICIES["cnn"], roots["yuv444p"][0], args),
        "state": fit_and_score("state", POLICIES["state"], roots["yuv444p"][0], args),
        "cnn_yuv420p": fit_and_score("cnn_yuv420p", POLICIES["cnn"], roots["yuv420p"][0], args),
    }
    best = {name: max(curve[1:], key=lambda row: row["return_mean"]) for name, curve in curves.items()}
    result = {
        "benchmark": "bc_image",
        "task": "FrankaReach, goal only in the 64 px front camera (privileged_state=false)",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__},
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "expert_success_rate": expert_success,
        "untrained": {name: curve[0] for name, curve in curves.items()},
        "best_by_return": best,
        "final": {name: curve[-1] for name, curve in curves.items()},
        "curves": curves,
        "wall_s": time.monotonic() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nheld-out after {args.updates} updates (expert {expert_success:.2f}):")
    for name, row in result["final"].items():
        print(f"  {name:>12}: success {row['success_rate']:.2f}, return {row['return_mean']:.1f} "
              f"(untrained {curves[name][0]['return_mean']:.1f})")  # fmt: skip
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
