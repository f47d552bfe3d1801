"""``rlinf/WorldModel-v0``: N imagined envs stepped by a trained world model, batched on its device,
behind the vector-env contract (so PPO, GRPO, SAC and the VLA path run in it unchanged).

Each episode starts from a recorded first frame (the ``starts.npz`` saved with the model), drawn by
the reset seed; with ``start_from="any"`` from any recorded frame, for short branched rollouts
(MBPO: a ``max_episode_steps`` of 10-20 keeps model errors from compounding, and PPO's value
bootstrap at truncation carries the rest of the task). Rewards and success are the model's (with
``reward_type="sparse"``, 1 on predicted success and 0 otherwise, as the sim tasks' sparse reward); an episode ends on predicted success (when
``terminate_on_success``; by default, when the recorded episodes ended at their first success) or at
``max_episode_steps``. Observations carry the predicted state and the
decoded camera frames (the recorded ones at a reset).

An episode that wanders where the recorded data does not reach is *halted* (MOReL): when the
ensemble's disagreement exceeds ``halt_multiple`` times its 99th percentile on held-out recordings,
the episode terminates with reward ``-halt_penalty``, so a policy learns to win inside what the
model knows instead of exploiting what it gets wrong.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policies.world_model.model import load_world_model
from protos.batch import ChunkResult, EpisodeSummary, select_row

WORLD_MODEL_ENV_ID = "rlinf/WorldModel-v0"
STARTS_FILE = "starts.npz"


class WorldModelVectorEnv:
    """Imagined rollouts of a saved world model, ``num_envs`` at a time."""

    source_kind = "world_model"  # how the env pool and a sim + world-model mix tag its slots

    def __init__(
        self,
        checkpoint: str,
        num_envs: int,
        max_episode_steps: int = 0,
        terminate_on_success: bool | None = None,  # None: as the recorded env did
        success_threshold: float = 0.5,
        device: str = "cpu",
        halt_multiple: float = 2.0,  # 0 never halts
        halt_penalty: float = 10.0,
        start_from: str = "first",  # "first": recorded first frames; "any": any recorded frame
        reward_type: str = "dense",  # "dense": the model's reward head; "sparse": 1 on predicted success
    ) -> None:
        if start_from not in ("first", "any"):
            raise ValueError(f"{WORLD_MODEL_ENV_ID}: start_from must be 'first' or 'any', got {start_from!r}")
        if reward_type not in ("dense", "sparse"):
            raise ValueError(
                f"{WORLD_MODEL_ENV_ID}: reward_type must be 'dense' or 'sparse', got {reward_type!r}"
            )
        self.sparse = reward_type == "sparse"
        if not checkpoint:
            raise ValueError(
                f"{WORLD_MODEL_ENV_ID} needs env.kwargs.checkpoint, a trained world model folder"
            )
        self.model, header = load_world_model(checkpoint)
        self.model.eval().to(device)
        starts_path = Path(checkpoint) / STARTS_FILE
        if not starts_path.is_file():
            raise ValueError(f"{checkpoint} has no {STARTS_FILE}: no recorded first frames to reset from")
        with np.load(starts_path) as starts:
            # Older models saved first frames only (no "first" mask).
            rows = np.ones(len(starts["state"]), bool) if "first" not in starts else starts["first"]
            rows = rows if start_from == "first" else np.ones_like(rows)
            self.start_states = torch.as_tensor(starts["state"][rows], device=device)
            self.start_images = {
                c: torch.as_tensor(starts[f"image.{c}"][rows], device=device) for c in self.model.cfg.cameras
            }
        if len(self.start_states) == 0:
            raise ValueError(f"{starts_path} holds no episodes to reset from")
        spec = self.model.spec
        self.spec = dataclasses.replace(
            spec,
            name=WORLD_MODEL_ENV_ID,
            instruction=header.get("task") or spec.instruction,
            max_episode_steps=max_episode_steps or spec.max_episode_steps,
            metadata={**spec.metadata, "world_model": str(checkpoint)},
        )
        self.num_envs, self.device = num_envs, torch.device(device)
        if terminate_on_success is None:
            terminate_on_success = bool(header.get("terminates_on_success", True))
        self.terminate_on_success, self.threshold = terminate_on_success, success_threshold
        scale = (header.get("disagreement") or {}).get("p99", 0.0)
        self.halt_above = halt_multiple * scale if halt_multiple > 0 and scale > 0 else float("inf")
        self.halt_penalty = halt_penalty
        self.halted = 0  # episodes halted off the data, since construction
        self.low = torch.as_tensor(spec.action.low_array(), device=self.device)
        self.high = torch.as_tensor(spec.action.high_array(), device=self.device)
        self.rng = np.random.default_rng(0)
        self.z = torch.zeros(num_envs, self.model.latent_dim, device=self.device)
        self.state = torch.zeros(num_envs, spec.state_dim, device=self.device)
        self.images = {
            c: torch.zeros(num_envs, *v.shape[1:], dtype=torch.uint8, device=self.device)
            for c, v in self.start_images.items()
        }
        self.steps = np.zeros(num_envs, int)
        self.returns = np.zeros(num_envs)
        self.succeeded = np.zeros(num_envs, bool)
        self.reset()  # every env starts from a recorded first frame

    # -- the batched contract ---------------------------------------------------------------------
    @torch.no_grad()
    def reset(
        self, seed: int | None = None, seeds: list[int | None] | None = None
    ) -> tuple[dict[str, Any], dict]:
        seeds = (
            seeds if seeds is not None else [None if seed is None else seed + i for i in range(self.num_envs)]
        )
        self._start(np.arange(self.num_envs), seeds)
        return self._obs(), {}

    def _start(self, envs: np.ndarray, seeds: list[int | None]) -> None:
        picks = [int(np.random.default_rng(s).integers(len(self.start_states))) if s is not None
                 else int(self.rng.integers(len(self.start_states))) for s in seeds]  # fmt: skip
        picks_t = torch.as_tensor(picks, device=self.device)
        envs_t = torch.as_tensor(envs, device=self.device)
        images = {c: v[picks_t] for c, v in self.start_images.items()}
        if images:
            self.z[envs_t] = self.model.encode(images)
        for c, v in images.items():
            self.images.setdefault(
                c, torch.zeros(self.num_envs, *v.shape[1:], dtype=torch.uint8, device=self.device)
            )
            self.images[c][envs_t] = v
        self.state[envs_t] = self.model.normalize(self.start_states[picks_t])
        self.steps[envs], self.returns[envs], self.succeeded[envs] = 0, 0.0, False

    def _obs(self) -> dict[str, Any]:
        return {
            "images": {c: v.cpu().numpy() for c, v in self.images.items()},
            "state": self.model.denormalize(self.state).float().cpu().numpy(),
            "instruction": [self.spec.instruction] * self.num_envs,
        }

    @torch.no_grad()
    def chunk_step(self, actions: np.ndarray) -> ChunkResult:
        actions = torch.as_tensor(np.asarray(actions, np.float32), device=self.device)
        n, chunk, _ = actions.shape
        rewards, success = np.zeros((n, chunk), np.float32), np.zeros((n, chunk), bool)
        terminated, truncated = np.zeros((n, chunk), bool), np.zeros((n, chunk), bool)
        valid = np.zeros((n, chunk), bool)
        running = np.ones(n, bool)
        final_obs: list[dict | None] = [None] * n
        finished = []
        for k in range(chunk):
            unit = (2 * (actions[:, k] - self.low) / (self.high - self.low) - 1).clamp(-1, 1)
            step = self.model.step(self.z, self.state, unit)
            live = torch.as_tensor(running, device=self.device)
            self.z = torch.where(live[:, None], step.latent, self.z)
            self.state = torch.where(live[:, None], step.state, self.state)
            if self.model.cfg.cameras:
                decoded = self.model.decode(self.z)
                for c, frame in decoded.items():
                    fresh = (frame * 255).round().to(torch.uint8)
                    self.images[c] = torch.where(live[:, None, None, None], fresh, self.images[c])
            # Off the data a predicted success is what a policy would exploit: the halt wins.
            halted = running & (step.disagreement > self.halt_above).cpu().numpy()
            won = (torch.sigmoid(step.success_logit) >= self.threshold).cpu().numpy() & ~halted
            reward = np.where(halted, -self.halt_penalty, won if self.sparse else step.reward.cpu().numpy())
            rewards[running, k] = reward[running]
            success[running, k] = won[running]
            valid[running, k] = True
            self.steps[running] += 1
            self.returns[running] += rewards[running, k]
            self.succeeded |= success[:, k]
            ended_success = running & won & self.terminate_on_success
            ended_time = running & ~ended_success & ~halted & (self.steps >= self.spec.max_episode_steps)
            terminated[ended_success | halted, k], truncated[ended_time, k] = True, True
            self.halted += int(halted.sum())
            done = np.flatnonzero(ended_success | halted | ended_time)
            if len(done):
                obs = self._obs()
                for i in done:
                    final_obs[i] = select_row(obs, int(i))
                    finished.append(
                        EpisodeSummary(
                            int(i), float(self.returns[i]), int(self.steps[i]), bool(self.succeeded[i])
                        )
                    )
                self._start(done, [None] * len(done))
                running[done] = False
            if not running.any():
                break
        return ChunkResult(self._obs(), rewards, terminated, truncated, success, valid, final_obs, finished)

    def close(self) -> None:
        pass
