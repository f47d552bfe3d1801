"""The batched ManiSkill env's contract on real ManiSkill, one JSON line of findings on stdout.

Run by test_maniskill.py in ManiSkill's venv on SAPIEN's CPU physics (one env), and by
test_maniskill_gpu.py on a GPU (a batch, with envs whose episodes end at different steps):

    python maniskill_gpu_checks.py NUM_ENVS SIM_BACKEND
"""

from __future__ import annotations

import json
import sys

import numpy as np

import sim_envs

HORIZON = 5


def findings(num_envs: int, sim_backend: str) -> dict:
    venv = sim_envs.make_vector(
        "rlinf/ManiSkillGPU-v0",
        num_envs,
        task="PushCube-v1",
        max_episode_steps=HORIZON,
        sim_backend=sim_backend,
    )
    try:
        spec = venv.spec
        first, _ = venv.reset(seed=3)
        same, _ = venv.reset(seed=3)
        other, _ = venv.reset(seed=4)
        found = {
            "spec": {"name": spec.name, "state_dim": spec.state_dim, "action_dim": spec.action.dim,
                     "instruction": spec.instruction, "max_episode_steps": spec.max_episode_steps},
            "state_shape": list(first["state"].shape), "state_dtype": str(first["state"].dtype),
            "same_seed_same_state": bool(np.array_equal(first["state"], same["state"])),
            "other_seed_other_state": not bool(np.allclose(first["state"], other["state"])),
        }  # fmt: skip
        venv.reset(seed=5)
        # Envs in the batch's first half start 2 steps later (ManiSkill's own partial reset), so
        # their episodes end 2 steps after the rest's, in the same chunk.
        late = np.arange(num_envs // 2)
        venv.chunk_step(np.zeros((num_envs, 2, spec.action.dim), np.float32))
        if late.size:
            import torch

            venv.env.reset(options={"env_idx": torch.as_tensor(late, device=venv.env.unwrapped.device)})
        result = venv.chunk_step(np.zeros((num_envs, HORIZON + 1, spec.action.dim), np.float32))
        ends = [
            int(np.flatnonzero(result.truncated[i])[0]) if result.truncated[i].any() else -1
            for i in range(num_envs)
        ]
        found.update(
            ends=ends,
            valid_after_end=[bool(result.valid[i, e + 1 :].any()) for i, e in enumerate(ends)],
            finished=sorted(e.env_index for e in result.finished),
            final_obs_given=[result.final_obs[i] is not None for i in range(num_envs)],
            final_differs_from_new_start=[
                result.final_obs[i] is not None and not np.allclose(result.final_obs[i]["state"], result.obs["state"][i])
                for i in range(num_envs)
            ],
            elapsed_after=[int(x) for x in np.asarray(venv.env.unwrapped.elapsed_steps.cpu())],
        )  # fmt: skip
        try:
            venv.chunk_step(np.full((num_envs, 1, spec.action.dim), np.nan, np.float32))
            found["nan_refused"] = False
        except ValueError as exc:
            found["nan_refused"] = "NaN" in str(exc)
        try:
            venv.reset(seeds=[7] * max(num_envs, 2))
            found["group_seeds_refused"] = False
        except ValueError as exc:
            found["group_seeds_refused"] = "one seed" in str(exc)
        return found
    finally:
        venv.close()


if __name__ == "__main__":
    print(json.dumps(findings(int(sys.argv[1]), sys.argv[2])))
