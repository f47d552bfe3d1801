"""The batch contract: chunk results of env groups put side by side."""

from __future__ import annotations

import numpy as np
import pytest

from protos.batch import ChunkResult, EpisodeSummary, stack_obs


def result(n: int, chunk: int = 2, executed: bool = False, **fields) -> ChunkResult:
    obs = stack_obs(
        [{"state": np.full(3, i, np.float32), "images": {}, "instruction": f"env {i}"} for i in range(n)]
    )
    zeros = lambda dtype: np.zeros((n, chunk), dtype)  # noqa: E731
    return ChunkResult(
        obs=obs, rewards=zeros(np.float32), terminated=zeros(bool), truncated=zeros(bool), success=zeros(bool),
        valid=np.ones((n, chunk), bool), final_obs=[None] * n,
        executed=np.ones((n, chunk, 4), np.float32) if executed else None, **fields,
    )  # fmt: skip


def test_concatenated_results_shift_the_later_groups_env_indices():
    sim = result(3, finished=[EpisodeSummary(2, 1.0, 10, True)], executed=True)
    robot = result(1, finished=[EpisodeSummary(0, 2.0, 5, False)], aborted=[0], executed=True,
                   intervened=np.array([[True, False]]))  # fmt: skip
    both = ChunkResult.concatenate([sim, robot])
    assert [e.env_index for e in both.finished] == [2, 3] and both.aborted == [3]
    assert both.rewards.shape == (4, 2) and both.executed.shape == (4, 2, 4)
    assert both.intervened.tolist() == [[False, False]] * 3 + [[True, False]]
    assert both.obs["instruction"] == ["env 0", "env 1", "env 2", "env 0"] and len(both.final_obs) == 4


def test_a_part_without_executed_actions_cannot_join_one_with_them():
    with pytest.raises(ValueError, match="either every part"):
        ChunkResult.concatenate([result(2), result(1, executed=True)])
