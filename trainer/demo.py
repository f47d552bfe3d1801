"""Play a policy in a sim env and save the front camera: random actions, the task's scripted
controller, or a saved policy (``--policy runs/<run>/checkpoints/step_N/policy``).

The quickest end-to-end check that the sim, the controller and rendering work on a machine, and a
way to watch what a checkpoint does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from protos.validation import ContractError

FIXED_POLICIES = ("random", "scripted")


@dataclass(frozen=True)
class RolloutResult:
    episodes: int
    success_rate: float
    return_mean: float
    video_path: Path


def saved_policy_env_kwargs(policy_dir: Path) -> dict[str, Any]:
    """The env config a checkpoint's policy was trained with (its run's config.yaml), if there is one."""
    import yaml

    for folder in policy_dir.resolve().parents:
        config = folder / "config.yaml"
        if config.is_file() and (folder / "checkpoints").is_dir():
            return dict((yaml.safe_load(config.read_text()).get("env") or {}).get("kwargs") or {})
    return {}


def run_rollout(
    env_id: str = "rlinf/FrankaPickLift-v0",
    policy: str = "scripted",
    episodes: int = 3,
    out_dir: Path = Path("runs/rollout"),
    seed: int = 0,
) -> RolloutResult:
    import imageio.v2 as imageio
    from tqdm import tqdm

    import sim_envs
    from protos.batch import stack_obs
    from protos.env_spec import spec_mismatch
    from sim_envs.scripted import expert_for

    loaded, kwargs = None, {"cameras": ("front",), "image_height": 128, "image_width": 128}
    if policy not in FIXED_POLICIES:
        from policies import load_policy

        loaded = load_policy(policy)  # a one-line error for what is not a saved policy
        kwargs = saved_policy_env_kwargs(Path(policy))
    env = sim_envs.make(env_id, render_mode="rgb_array", render_size=128, **kwargs)
    if loaded is not None:
        # The policy's spec is the expected one, the env's is compared against it.
        problem = spec_mismatch(loaded.spec, env.env_spec, f"env {env_id}")
        if problem:
            env.close()
            raise ContractError(f"the policy at {policy} does not fit env {env_id}: {problem}")
    scripted = expert_for(env) if policy == "scripted" else None
    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    frames, returns, successes = [], [], []
    with tqdm(total=episodes * env.max_episode_steps, desc=f"rollout {env_id}", unit="step") as bar:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            if scripted is not None:
                scripted.reset()
            ret, success, done, chunk = 0.0, False, False, []
            while not done:
                if scripted is not None:
                    chunk = [scripted.act({"state": env.privileged_state()})]
                elif loaded is not None and not chunk:
                    chunk = list(loaded.act(stack_obs([obs]), mode="greedy").actions[0].cpu().numpy())
                elif loaded is None:
                    chunk = [rng.uniform(-1, 1, env.env_spec.action.dim).astype(np.float32)]
                obs, reward, terminated, truncated, info = env.step(chunk.pop(0))
                frames.append(env.render())
                ret += reward
                success |= info["success"]
                bar.update(1)
                done = terminated or truncated
            returns.append(ret)
            successes.append(success)
            bar.set_postfix(success=f"{np.mean(successes):.2f}", ret=f"{np.mean(returns):.1f}")
    env.close()
    video_path = out_dir / "front.gif"
    imageio.mimsave(video_path, frames[::2], duration=0.2, loop=0)
    imageio.imwrite(out_dir / "front_last.png", frames[-1])
    result = RolloutResult(episodes, float(np.mean(successes)), float(np.mean(returns)), video_path)
    summary = {**result.__dict__, "video_path": str(video_path), "env_id": env_id, "policy": policy}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return result
