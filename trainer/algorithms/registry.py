"""Algorithm names -> classes, each an :class:`~trainer.algorithms.base.Algorithm`.

An unknown name is a ``KeyError`` naming the known ones; a module that fails to import raises its own
``ImportError`` (it is never taken for an absent algorithm).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.algorithms.base import Algorithm

ALGORITHMS = {
    "ppo": ("trainer.algorithms.ppo", "PPO"),
    "grpo": ("trainer.algorithms.grpo", "GRPO"),
    "sac": ("trainer.algorithms.sac", "SAC"),
    "rlpd": ("trainer.algorithms.rlpd", "RLPD"),
    "bc": ("trainer.algorithms.bc", "BC"),
    # Supervised, run by ``rlinf-trainer train`` without envs (its class says ``standalone``).
    "reward_classifier": ("trainer.reward_training", "RewardClassifierTraining"),
    "world_model": ("trainer.world_model_training", "WorldModelTraining"),
}


def algorithm_class(name: str) -> type[Algorithm]:
    if name not in ALGORITHMS:
        raise KeyError(f"unknown algorithm {name!r}; known: {sorted(ALGORITHMS)}")
    module, attribute = ALGORITHMS[name]
    return getattr(importlib.import_module(module), attribute)
