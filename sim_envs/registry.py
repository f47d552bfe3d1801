"""Env ids and factories with one-line errors for unknown ids or config keys.

Our MuJoCo tabletop tasks have ``rlinf/<Arm><Task>-v0`` ids (the arm and task in ``ENV_IDS``). Any other id registered with gymnasium (after
importing ``module``, the config key that names the module registering it) is built through the
gymnasium adapter (:mod:`sim_envs.adapters.gymnasium`).
"""

from __future__ import annotations

from typing import Any

from protos.user_error import UserError
from sim_envs.errors import EnvConfigError

# id -> the tabletop env's kwargs (every task runs on every arm through env.kwargs.robot as well).
ENV_IDS: dict[str, dict[str, str]] = {
    "rlinf/FrankaReach-v0": {"task": "reach"},
    "rlinf/FrankaPush-v0": {"task": "push"},
    "rlinf/FrankaPickLift-v0": {"task": "pick_lift"},
    "rlinf/FrankaPickColor-v0": {"task": "pick_color"},
    "rlinf/UR5ePickLift-v0": {"task": "pick_lift", "robot": "ur5e"},
}
# Other simulators' suites, each behind its own adapter (imported only when such an env is made).
SUITE_IDS = {
    "rlinf/MetaWorld-v0": "sim_envs.adapters.metaworld:MetaWorldEnv",
    "rlinf/ManiSkill-v0": "sim_envs.adapters.maniskill:ManiSkillEnv",
    "rlinf/LIBERO-v0": "sim_envs.adapters.libero:LiberoEnv",
}
# Suites that are batched by nature (one env object steps N envs on a GPU): vector envs only.
VECTOR_SUITE_IDS = {
    "rlinf/IsaacLab-v0": "sim_envs.adapters.isaaclab:IsaacLabVectorEnv",
    "rlinf/ManiSkillGPU-v0": "sim_envs.adapters.maniskill_gpu:ManiSkillGPUVectorEnv",
}
GYMNASIUM = "gymnasium"  # what check_env_id returns for an outside gymnasium env
SUITE = "suite"  # what check_env_id returns for one of SUITE_IDS


class UnknownEnvError(UserError, ValueError):
    """The env id is neither one of ours nor registered with gymnasium."""


def check_env_id(env_id: str, module: str = "") -> str:
    """The task behind ``env_id`` (``gymnasium`` for an outside env), or an error listing the known ids."""
    if env_id in ENV_IDS:
        return ENV_IDS[env_id]["task"]
    if env_id in SUITE_IDS or env_id in VECTOR_SUITE_IDS:
        return SUITE
    import gymnasium

    from sim_envs.adapters.gymnasium import import_env_module

    import_env_module(module)
    if env_id in gymnasium.registry:
        return GYMNASIUM
    hint = (
        ""
        if module
        else " (an outside gymnasium env: name the module that registers it in env.kwargs.module)"
    )
    raise UnknownEnvError(
        f"unknown env id {env_id!r}; known: {sorted(ENV_IDS) + sorted(SUITE_IDS) + sorted(VECTOR_SUITE_IDS)}{hint}"
    )


def make(env_id: str, **config: Any):
    """Build one env (unwrapped, with ``env_spec``) from an id and config overrides."""
    kind = check_env_id(env_id, config.get("module", ""))
    if kind == GYMNASIUM:
        from sim_envs.adapters.gymnasium import GymnasiumAdapter

        return GymnasiumAdapter(env_id, **config)
    if env_id in VECTOR_SUITE_IDS:
        raise EnvConfigError(f"{env_id} is batched (one object steps every env): build it with make_vector")
    if kind == SUITE:
        return make_suite_env(env_id, load_entry_point(SUITE_IDS[env_id]), **config)
    from sim_envs.franka_env import FrankaEnv

    return FrankaEnv(**{**ENV_IDS[env_id], **config})


def load_entry_point(path: str):
    """``module:name`` -> the object (a suite's env class), imported only now."""
    import importlib

    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def make_suite_env(env_id: str, env_class, *args: Any, **config: Any):
    """A suite's env (or batched vector env) from its config, naming keys it does not take."""
    try:
        return env_class(*args, **config)
    except TypeError as exc:  # e.g. a Franka preset's env.kwargs handed to another suite
        raise EnvConfigError(f"{env_id} does not take env.kwargs {sorted(config)}: {exc}") from None
