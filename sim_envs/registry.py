"""Env ids and factories with one-line errors for unknown ids or config keys."""

from __future__ import annotations

from typing import Any

ENV_IDS = {
    "rlinf/FrankaReach-v0": "reach",
    "rlinf/FrankaPush-v0": "push",
    "rlinf/FrankaPickLift-v0": "pick_lift",
    "rlinf/FrankaPickColor-v0": "pick_color",
}


class UnknownEnvError(ValueError):
    """The env id is not one of ours."""


def check_env_id(env_id: str) -> str:
    """The task behind ``env_id``, or an error listing the known ids."""
    if env_id not in ENV_IDS:
        raise UnknownEnvError(f"unknown env id {env_id!r}; known: {sorted(ENV_IDS)}")
    return ENV_IDS[env_id]


def make(env_id: str, **config: Any):
    """Build one env (unwrapped, with ``env_spec``) from an id and config overrides."""
    from sim_envs.franka_env import FrankaEnv

    return FrankaEnv(task=check_env_id(env_id), **config)
