"""What a tiny VLA learned from SFT, where closed-loop success alone does not say why it fails.

Each run (``head:demos:sft_updates``; the heads, demos and SFT of ``benchmarks/vla.py``) reports,
after SFT:

* ``success``: greedy success on held-out seeds, as ``benchmarks/vla.py`` scores it;
* ``frame_mse``: the greedy chunk's squared error per action dimension against the recorded one,
  on random training frames;
* ``start_mse``: the first decision's squared error per action dimension at the reset states of the
  training episodes, against the scripted expert. At a start the cube is away from the hand, so
  the expert's x / y actions are mostly saturated at ±1 and their sign is only known by reading the
  cube's and the hand's positions from the state.

    python benchmarks/vla_sft_probe.py [--runs pi0:100:300,pi05:300:1200,pi05:300:4000] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vla import ENV, HEADS, RESULTS, demo_dataset, evaluate, sft

import sim_envs
from sim_envs.scripted import expert_for
from trainer.expert_demos import DEMO_SEED

TASK = "rlinf/FrankaPickColor-v0"
ENV_KWARGS = {**ENV, "privileged_state": True}
FRAMES = 256  # training frames in the frame error
STARTS = 24  # training episodes whose first decision is scored


def frame_mse(policy, spec, regression) -> list[float]:
    """Greedy chunks against the recorded ones on ``FRAMES`` random training frames."""
    idx = torch.randint(0, len(regression.states), (FRAMES,), generator=torch.Generator().manual_seed(1))
    obs = {
        "state": regression.states[idx],
        "images": {c: v[idx] for c, v in regression.images.items()},
        "instruction": regression.instructions(idx),
    }
    actions = torch.as_tensor(spec.action.to_unit(policy.act(obs, mode="greedy").actions.numpy()))
    return (actions - regression.targets[idx]).pow(2).mean((0, 1)).tolist()


def start_mse(policy, episodes: int) -> list[float]:
    """The first decision against the scripted expert, from the training episodes' reset states."""
    env = sim_envs.make(TASK, **ENV_KWARGS)
    spec, errors = env.env_spec, []
    for episode in range(episodes):
        obs, _ = env.reset(seed=DEMO_SEED + episode)
        expert = expert_for(env).act({"state": env.privileged_state(perceived=False)})
        batch = {
            "state": obs["state"][None],
            "images": {c: v[None] for c, v in obs["images"].items()},
            "instruction": [obs["instruction"]],
        }
        action = policy.act(batch, mode="greedy").actions[0, 0].numpy()
        errors.append((spec.action.to_unit(action) - spec.action.to_unit(expert)) ** 2)
    env.close()
    return np.mean(errors, 0).tolist()


def probe(head: str, demos: Path, updates: int, venv, eval_episodes: int) -> dict:
    policy, regression, losses, sft_s = sft(head, venv.spec, demos, updates, 1e-3, chunk=4, seed=0)
    policy.eval()
    return {
        "sft_loss": losses[-1],
        "sft_s": sft_s,
        "frame_mse": frame_mse(policy, venv.spec, regression),
        "start_mse": start_mse(policy, STARTS),
        **evaluate(policy, venv, eval_episodes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", default="pi0:100:300,pi05:300:1200,pi05:300:4000", help="head:demos:sft_updates,..."
    )
    parser.add_argument("--eval-episodes", type=int, default=48)
    parser.add_argument("--work", default="runs/bench_vla")
    parser.add_argument("--out", default=str(RESULTS / "vla_sft_probe.json"))
    args = parser.parse_args()
    runs = []
    for run in args.runs.split(","):
        parts = run.split(":")
        if len(parts) != 3 or parts[0] not in HEADS or not (parts[1].isdigit() and parts[2].isdigit()):
            parser.error(f"--runs: {run!r} is not head:demos:sft_updates with a head of {', '.join(HEADS)}")
        runs.append((parts[0], int(parts[1]), int(parts[2])))
    torch.set_num_threads(1)
    venv = sim_envs.make_vector(TASK, 16, backend="inline", **ENV_KWARGS)
    results = {"task": TASK, "state": "privileged", "frames": FRAMES, "starts": STARTS,
               "eval_episodes": args.eval_episodes, "action_dims": ["x", "y", "z", "gripper"], "runs": {}}  # fmt: skip
    for head, demos, updates in runs:
        path = demo_dataset(args.work, TASK, "privileged", demos, 0.0, ENV_KWARGS)
        record = probe(head, path, updates, venv, args.eval_episodes)
        results["runs"][f"{head}:{demos}:{updates}"] = record
        print(
            f"{head}:{demos}:{updates}: "
            + json.dumps({k: np.round(v, 3).tolist() for k, v in record.items()})
        )
    venv.close()
    results["machine"] = {"python": platform.python_version(), "torch": torch.__version__}
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
