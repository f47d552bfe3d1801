"""Simulated and imagined envs side by side, as one vector env with a source per slot.

``env.world_model_envs: N`` puts N ``rlinf/WorldModel-v0`` envs (``env.world_model``: their kwargs)
after the sim's ``env.num_envs``. Every algorithm sees one batch; each slot's source
(``sim:<env id>``, ``world_model:rlinf/WorldModel-v0``) carries a training weight by kind
(``env.world_model_weight`` for the imagined ones, 1 for the simulated), which the algorithms
apply through ``source_weights`` as they do for robots in the env pool.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from protos.batch import ChunkResult, VectorEnv, concat_obs
from protos.env_spec import EnvSpec, spec_mismatch
from protos.validation import ContractError


def source_kind(venv: VectorEnv) -> str:
    """``world_model`` for imagined envs, ``sim`` for everything else on the trainer."""
    return getattr(venv, "source_kind", "sim")


def slot_sources(venv: VectorEnv) -> list[str]:
    """Each slot's source tag: a mix's own, else ``<kind>:<env id>`` for every slot."""
    own = getattr(venv, "sources", None)
    return list(own) if own is not None else [f"{source_kind(venv)}:{venv.spec.name}"] * venv.num_envs


def describe(venv: VectorEnv) -> str:
    """How an error names a part: "the world model (rlinf/WorldModel-v0)"."""
    return f"the {source_kind(venv).replace('_', ' ')} ({venv.spec.name})"


class MixedVectorEnv:
    """Vector envs of one spec (a simulator, a world model) behind the batched contract."""

    def __init__(self, parts: list[VectorEnv], weights: dict[str, float] | None = None) -> None:
        if not parts:
            raise ValueError("a mixed vector env needs at least one part")
        self.parts = parts
        self.spec: EnvSpec = parts[0].spec
        for part in parts[1:]:
            problem = spec_mismatch(self.spec, part.spec, describe(part))
            if problem:
                raise ContractError(problem)
        self.weights = {"sim": 1.0, "world_model": 1.0, **(weights or {})}
        self.offsets = np.cumsum([0] + [part.num_envs for part in parts])

    @property
    def num_envs(self) -> int:
        return int(self.offsets[-1])

    @property
    def env_id(self) -> str:
        return getattr(self.parts[0], "env_id", self.spec.name)

    @property
    def env_config(self) -> dict[str, Any]:
        return getattr(self.parts[0], "env_config", {})

    @property
    def sources(self) -> list[str]:
        return [source for part in self.parts for source in slot_sources(part)]

    @property
    def source_weights(self) -> np.ndarray:
        return np.array([self.weights[source.split(":")[0]] for source in self.sources], np.float32)

    def reset(
        self, seed: int | None = None, seeds: list[int | None] | None = None
    ) -> tuple[dict[str, Any], dict]:
        if seeds is not None and len(seeds) != self.num_envs:
            raise ValueError(f"seeds must have one entry per env ({self.num_envs}), got {len(seeds)}")
        observations = []
        for part, start, stop in zip(self.parts, self.offsets[:-1], self.offsets[1:]):
            part_seed = None if seed is None else seed + int(start)
            part_seeds = None if seeds is None else seeds[start:stop]
            observations.append(part.reset(seed=part_seed, seeds=part_seeds)[0])
        for part, obs in zip(self.parts[1:], observations[1:]):
            missing = sorted(set(observations[0]["images"]) - set(obs["images"]))
            if missing:
                raise ContractError(f"{describe(part)} gives no frames of cameras {missing}")
        return concat_obs(observations), {}

    def step(self, actions: np.ndarray) -> ChunkResult:
        return self.chunk_step(np.asarray(actions)[:, None, :])

    def chunk_step(self, actions: np.ndarray) -> ChunkResult:
        actions = np.asarray(actions)
        if actions.ndim != 3 or actions.shape[0] != self.num_envs:
            raise ValueError(
                f"actions expected [{self.num_envs}, chunk, {self.spec.action.dim}], got {list(actions.shape)}"
            )
        parts = zip(self.parts, self.offsets[:-1], self.offsets[1:])
        return ChunkResult.concatenate([part.chunk_step(actions[start:stop]) for part, start, stop in parts])

    def close(self) -> None:
        for part in self.parts:
            part.close()
