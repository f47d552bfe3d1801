"""Greedy evaluation episodes, with a GIF of the front camera."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

import sim_envs
from policies import Policy
from protos.atomic_files import write_atomic
from protos.batch import stack_obs
from sim_envs.adapters.gymnasium import AdapterError

log = logging.getLogger(__name__)


def evaluate_policy(
    policy: Policy,
    env_id: str,
    env_kwargs: dict[str, Any],
    episodes: int,
    seed: int,
    video_path: Path | None = None,
) -> dict[str, float]:
    """Play ``episodes`` greedy episodes in one env; save the first one's front camera as a GIF."""
    env = None
    if video_path is not None:
        try:
            env = sim_envs.make(env_id, **env_kwargs, render_mode="rgb_array", render_size=160)
        except AdapterError as exc:  # an outside env that takes no render_mode: evaluate without a video
            log.warning("%s: no evaluation video (%s)", env_id, exc)
            video_path = None
    if env is None:
        env = sim_envs.make(env_id, **env_kwargs)
    returns, successes, frames = [], [], []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, success, done = 0.0, False, False
            while not done:
                chunk = policy.act(stack_obs([obs]), mode="greedy").actions[0].cpu().numpy()
                for action in chunk:
                    obs, reward, terminated, truncated, info = env.step(action)
                    frame = env.render() if video_path is not None and episode == 0 else None
                    if frame is not None:
                        frames.append(frame)
                    total += reward
                    success |= info["success"]
                    done = terminated or truncated
                    if done:
                        break
            returns.append(total)
            successes.append(success)
    finally:
        env.close()
    if video_path is not None and frames:
        import imageio.v2 as imageio

        write_atomic(video_path, lambda tmp: imageio.mimsave(tmp, frames, duration=0.1, loop=0))
    return {"eval_return_mean": float(np.mean(returns)), "eval_success_rate": float(np.mean(successes))}
