"""What the runner, the Ray workers and the checkpoints need from an algorithm, and nothing more."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from policies import Policy
from protos.batch import VectorEnv
from trainer.algorithms.common import IterationResult


class Algorithm(Protocol):
    """One training algorithm over one policy. ``iterate`` plays and learns; the state dicts
    carry the optimisers (and critics, buffers' bookkeeping) through a checkpoint."""

    config_class: ClassVar[type]
    policy: Policy

    def __init__(self, policy: Policy, cfg: Any) -> None: ...

    def iterate(self, venv: VectorEnv, seed: int) -> IterationResult: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...
