"""Env ids and factories with one-line errors for unknown ids or config keys."""

from __future__ import annotations

from typing import Any

ENV_IDS = {
    "rlinf/FrankaReach-v0": "reach",
    "rlinf/FrankaPush-v0": "push",
    "rlinf/FrankaPickLift-v0": "pick_lift",
}


class UnknownEnvError(ValueError):
    """The env id is not one of ours."""


def _task_for(env_id: str) -> str:
    if env_id not in ENV_IDS:
        raise UnknownEnvError(f"unknown env id {env_id!r}; known: {sorted(ENV_IDS)}")
    return ENV_IDS[env_id]


def make(env_id: str, **config: Any):
    """Build one env (unwrapped, with ``env_spec``) from an id and config overrides."""
    from sim_envs.franka_env import FrankaEnv

    return FrankaEnv(task=_task_for(env_id), **config)


def make_vector(
    env_id: str, num_envs: int, *, backend: str = "inline", num_workers: int | None = None, **config: Any
):
    """Build a :class:`sim_envs.vector.SimVectorEnv` of ``num_envs`` copies of one env."""
    from sim_envs.vector import SimVectorEnv

    _task_for(env_id)
    return SimVectorEnv(env_id, num_envs, backend=backend, num_workers=num_workers, env_config=config)
