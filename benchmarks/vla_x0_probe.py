"""Where a flow VLA's noiseless chain starts: is the greedy start x0 = 0 a fair score of it?

For a cached SFT start of ``benchmarks/vla.py`` (its ``--work`` folder), the chain without the
SDE's noise is run from x0 = s z (z ~ N(0, I), seeded) for each scale s:

* ``sensitivity``: mean |change of the actions| when x0 moves by 1e-3 z' (one batch of 16 resets);
* ``success``: closed-loop success on the held-out seeds ``benchmarks/vla.py`` scores on (s = 0 is
  its greedy score).

    python benchmarks/vla_x0_probe.py --head pi05 --cache runs/bench_vla/sft_pi05_... [--scales 0,0.25,1]
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

from vla import ENV, EVAL_SEED, RESULTS, STATES, sft

import sim_envs
from trainer.algorithms.common import decisions_per_episode


def noiseless_chain(policy, obs, scale: float) -> torch.Tensor:
    """The env actions of the chain from x0 = scale * z without the SDE's noise."""
    prefix, state = policy._prefix(obs)
    x0 = scale * torch.randn(state.shape[0], policy.chunk_size, policy.dims.max_action_dim)
    return policy.env_actions(chain_from(policy, prefix, state, x0))


def chain_from(policy, prefix, state, x: torch.Tensor) -> torch.Tensor:
    for t in policy.schedule.times():
        x, _ = policy.schedule.step(x, policy._velocity(prefix, state, x, t), t, stochastic=False)
    return x


@torch.no_grad()
def probe(policy, venv, scale: float, episodes: int) -> dict[str, float]:
    obs, _ = venv.reset(seed=123)
    prefix, state = policy._prefix(obs)
    torch.manual_seed(0)
    x0 = scale * torch.randn(venv.num_envs, policy.chunk_size, policy.dims.max_action_dim)
    moved = chain_from(policy, prefix, state, x0 + 1e-3 * torch.randn_like(x0))
    sensitivity = (
        policy.env_actions(moved) - policy.env_actions(chain_from(policy, prefix, state, x0))
    ).abs()
    finished = []
    for start in range(0, episodes, venv.num_envs):
        torch.manual_seed(0)
        obs, _ = venv.reset(seed=EVAL_SEED + start)
        for _ in range(decisions_per_episode(venv, policy)):
            result = venv.chunk_step(noiseless_chain(policy, obs, scale).numpy())
            finished += result.finished
            obs = result.obs
    return {
        "sensitivity": float(sensitivity.mean()),
        "success": float(np.mean([e.success for e in finished])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head", default="pi05", choices=["pi0", "pi05", "smolvla"])
    parser.add_argument("--cache", required=True, help="an SFT start benchmarks/vla.py kept in its --work")
    parser.add_argument("--state", choices=sorted(STATES), default="privileged")
    parser.add_argument("--scales", default="0,0.25,1")
    parser.add_argument("--eval-episodes", type=int, default=96)
    parser.add_argument("--out", default=str(RESULTS / "vla_x0_probe.json"))
    args = parser.parse_args()
    cache = Path(args.cache)
    if not (cache / "sft.json").is_file():
        parser.error(f"--cache {cache}: no SFT start there (run benchmarks/vla.py with its --work first)")
    torch.set_num_threads(1)
    venv = sim_envs.make_vector(
        "rlinf/FrankaPickColor-v0", 16, backend="inline", **{**ENV, **STATES[args.state]}
    )
    policy, *_ = sft(args.head, venv.spec, cache, 1, 1e-3, 4, 0, {"flow_noise_level": 0.0}, cache)
    results = {"head": args.head, "cache": cache.name, "eval_episodes": args.eval_episodes, "scales": {}}
    for scale in (float(s) for s in args.scales.split(",")):
        results["scales"][str(scale)] = probe(policy, venv, scale, args.eval_episodes)
        print(f"x0 = {scale:g} z: {results['scales'][str(scale)]}", flush=True)
    venv.close()
    results["machine"] = {"python": platform.python_version(), "torch": torch.__version__}
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
