"""What simulators that step a whole batch in one call share (IsaacLab; ManiSkill on a GPU).

Such a simulator is its own vector env, in the trainer's process: one ``step(actions[N, A])`` moves
every env, and an env whose episode ended is reset inside the batch, not waited for. So in a chunk,
an env whose episode ends mid-chunk plays the rest of the chunk into its new episode, masked invalid.
:class:`BatchedVectorEnv` holds the chunk loop, the action checks and the episode accounting; a
subclass says how to advance its batch one step (:meth:`_advance`) and how to read its observation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from protos import EnvSpec
from protos.batch import ChunkResult, EpisodeSummary
from protos.validation import ContractError


@dataclass
class BatchStep:
    """One step of every env in the batch, as numpy ``[N]`` arrays. ``final_obs``: the last
    observation of each env whose episode ended (None where it ended or the simulator cannot say)."""

    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    success: np.ndarray
    final_obs: list[dict[str, Any] | None]


def to_numpy(value: Any) -> np.ndarray:
    """A torch tensor (on any device) or array-like as a numpy array, batch axis kept."""
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)


def one_batch_seed(env_id: str, seeds: list[int | None]) -> int | None:
    """The one seed a batch is seeded with, where ``seeds`` mean no more than that (``s, s+1, ...``,
    what plain ``seed=s`` means); per-env seeds (GRPO's groups) are refused."""
    base = seeds[0]
    if any(s is None or base is None or s != base + i for i, s in enumerate(seeds)):
        raise ContractError(
            f"{env_id}: the simulator seeds its whole batch with one seed; per-env seeds (e.g. GRPO's "
            "groups) are not available: use PPO or SAC"
        )
    return base


class BatchedVectorEnv:
    """Base of a batched simulator seen as one of our vector envs (``chunk_step`` contract)."""

    spec: EnvSpec

    def __init__(self, num_envs: int) -> None:
        self._num_envs = num_envs
        self._returns = np.zeros(num_envs)
        self._lengths = np.zeros(num_envs, int)
        self._success = np.zeros(num_envs, bool)

    @property
    def num_envs(self) -> int:
        return self._num_envs

    # -- what a subclass gives -----------------------------------------------------------------
    def _advance(self, actions: np.ndarray) -> BatchStep:
        """Step every env once with ``actions`` [N, A] (clipped to the spec), resetting those that ended."""
        raise NotImplementedError

    def _observation(self) -> dict[str, Any]:
        """The batch's current observation in the shared layout."""
        raise NotImplementedError

    # -- the contract --------------------------------------------------------------------------
    def _clear_episodes(self) -> None:
        self._returns[:], self._lengths[:], self._success[:] = 0.0, 0, False

    def step(self, actions: np.ndarray) -> ChunkResult:
        return self.chunk_step(np.asarray(actions)[:, None, :])

    def _checked(self, actions: np.ndarray) -> np.ndarray:
        actions = np.asarray(actions, np.float32)
        n, dim = self.num_envs, self.spec.action.dim
        if actions.ndim != 3 or actions.shape[0] != n or actions.shape[2] != dim:
            raise ContractError(f"actions expected [{n}, chunk, {dim}], got {list(actions.shape)}")
        if not np.isfinite(actions).all():
            raise ContractError("actions contain NaN or inf")
        low = np.asarray(self.spec.action.low, np.float32)
        high = np.asarray(self.spec.action.high, np.float32)
        return np.clip(actions, low, high)

    def chunk_step(self, actions: np.ndarray) -> ChunkResult:
        actions = self._checked(actions)
        n, chunk = self.num_envs, actions.shape[1]
        rewards, success = np.zeros((n, chunk), np.float32), np.zeros((n, chunk), bool)
        terminated, truncated, valid = (np.zeros((n, chunk), bool) for _ in range(3))
        ended, finished = np.zeros(n, bool), []
        final_obs: list[dict[str, Any] | None] = [None] * n
        for t in range(chunk):
            out = self._advance(actions[:, t])
            live = ~ended
            term, trunc = out.terminated.astype(bool), out.truncated.astype(bool)
            won = out.success.astype(bool)
            rewards[live, t], success[live, t], valid[live, t] = out.reward[live], won[live], True
            terminated[live, t], truncated[live, t] = term[live], trunc[live] & ~term[live]
            self._returns[live] += out.reward[live]
            self._lengths[live] += 1
            self._success[live] |= won[live]
            for i in np.flatnonzero(live & (term | trunc)):
                final_obs[i] = out.final_obs[i]
                finished.append(
                    EpisodeSummary(
                        int(i), float(self._returns[i]), int(self._lengths[i]), bool(self._success[i])
                    )
                )
                self._returns[i], self._lengths[i], self._success[i] = 0.0, 0, False
            ended |= term | trunc
        return ChunkResult(
            obs=self._observation(),
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            success=success,
            valid=valid,
            final_obs=final_obs,
            finished=finished,
        )
