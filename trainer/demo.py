"""Play a fixed policy (random or scripted) in a sim env and save front-camera frames.

The quickest end-to-end check that the sim, the controller and rendering work on a machine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class RolloutResult:
    episodes: int
    success_rate: float
    return_mean: float
    video_path: Path


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
    from sim_envs.scripted import ScriptedPickLift

    env = sim_envs.make(env_id, cameras=("front",), image_height=128, image_width=128)
    rng = np.random.default_rng(seed)
    if policy == "scripted":
        if env.env_spec.metadata["task"] != "pick_lift":
            raise ValueError(f"the scripted policy only solves rlinf/FrankaPickLift-v0, not {env_id}")
        scripted = ScriptedPickLift(env.env_spec)
    elif policy != "random":
        raise ValueError(f"policy must be 'random' or 'scripted', got {policy!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    frames, returns, successes = [], [], []
    total = episodes * env.max_episode_steps
    with tqdm(total=total, desc=f"rollout {env_id}", unit="step") as bar:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            if policy == "scripted":
                scripted.reset()
            ret, success = 0.0, False
            for _ in range(env.max_episode_steps):
                if policy == "scripted":
                    action = scripted.act(obs)
                else:
                    action = rng.uniform(-1, 1, env.env_spec.action.dim).astype(np.float32)
                obs, reward, terminated, truncated, info = env.step(action)
                frames.append(obs["images"]["front"])
                ret += reward
                success |= info["success"]
                bar.update(1)
                if terminated or truncated:
                    break
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
