"""One table of env ids, each entry saying what building it needs; one-line errors for unknown ids.

An :class:`EnvEntry` names the class that builds one env and / or the class that steps N envs itself
(batched on its device, in this process), the kwargs the id fixes, the venv its simulator needs and
whether it is imagined (a learned model) rather than simulated. The trainer asks the entry, never
the id. Our MuJoCo tabletop tasks are ``rlinf/<Arm><Task>-v0`` (``ENV_IDS``); another package adds
its envs with :func:`register_env` (the world model does, from ``policies``). Any other id registered
with gymnasium (after importing ``module``, the config key that names the module registering it) is
built through the gymnasium adapter (:mod:`sim_envs.adapters.gymnasium`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protos.user_error import UserError
from sim_envs.errors import EnvConfigError

TABLETOP_ENV = "sim_envs.franka_env:FrankaEnv"


@dataclass(frozen=True)
class EnvEntry:
    """What an env id is built from, and what it needs."""

    env: str = ""  # "module:Class" of one env; "" when the id is batched only
    vector_env: str = ""  # "module:Class" that steps N envs itself (batched, in this process)
    kwargs: Mapping[str, Any] = field(default_factory=dict)  # what the id fixes (the task, the arm)
    venv: str = ""  # its simulator's own venv (scripts/sim_venv.sh VENV; env.python runs its workers)
    imagined: bool = False  # a learned model of the world, not a simulator

    @property
    def batched(self) -> bool:
        """Steps its envs itself: the trainer builds it whole and evaluates through it."""
        return bool(self.vector_env)


# Tabletop ids -> the env's kwargs (every task runs on every arm through env.kwargs.robot as well).
ENV_IDS: dict[str, dict[str, str]] = {
    "rlinf/FrankaReach-v0": {"task": "reach"},
    "rlinf/FrankaPush-v0": {"task": "push"},
    "rlinf/FrankaPickLift-v0": {"task": "pick_lift"},
    "rlinf/FrankaPickColor-v0": {"task": "pick_color"},
    "rlinf/UR5ePickLift-v0": {"task": "pick_lift", "robot": "ur5e"},
}
ENVS: dict[str, EnvEntry] = {
    **{env_id: EnvEntry(TABLETOP_ENV, kwargs=kwargs) for env_id, kwargs in ENV_IDS.items()},
    # Other simulators' suites, each behind its own adapter (imported only when such an env is made).
    "rlinf/MetaWorld-v0": EnvEntry("sim_envs.adapters.metaworld:MetaWorldEnv", venv="metaworld"),
    "rlinf/ManiSkill-v0": EnvEntry("sim_envs.adapters.maniskill:ManiSkillEnv", venv="maniskill"),
    "rlinf/LIBERO-v0": EnvEntry("sim_envs.adapters.libero:LiberoEnv", venv="libero"),
    # Batched by nature (one object steps N envs on a GPU): vector envs only.
    "rlinf/IsaacLab-v0": EnvEntry(vector_env="sim_envs.adapters.isaaclab:IsaacLabVectorEnv"),
    "rlinf/ManiSkillGPU-v0": EnvEntry(vector_env="sim_envs.adapters.maniskill_gpu:ManiSkillGPUVectorEnv"),
}
OUTSIDE = EnvEntry()  # an outside gymnasium env: built one at a time through the adapter


class UnknownEnvError(UserError, ValueError):
    """The env id is neither one of ours nor registered with gymnasium."""


def register_env(env_id: str, entry: EnvEntry) -> None:
    """Add an id (another package's env). Registering the same entry again is a no-op."""
    if ENVS.get(env_id, entry) != entry:
        raise ValueError(f"env id {env_id!r} is registered already, as {ENVS[env_id]}")
    ENVS[env_id] = entry


def env_entry(env_id: str, module: str = "") -> EnvEntry:
    """The entry of ``env_id`` (:data:`OUTSIDE` for a gymnasium env), or an error listing the ids."""
    if env_id in ENVS:
        return ENVS[env_id]
    import gymnasium

    from sim_envs.adapters.gymnasium import import_env_module

    import_env_module(module)
    if env_id in ENVS:  # the module registered it with us
        return ENVS[env_id]
    if env_id in gymnasium.registry:
        return OUTSIDE
    hint = (
        ""
        if module
        else " (an outside gymnasium env: name the module that registers it in env.kwargs.module)"
    )
    raise UnknownEnvError(f"unknown env id {env_id!r}; known: {sorted(ENVS)}{hint}")


def make(env_id: str, **config: Any):
    """Build one env (unwrapped, with ``env_spec``) from an id and config overrides."""
    entry = env_entry(env_id, config.get("module", ""))
    if entry is OUTSIDE:
        from sim_envs.adapters.gymnasium import GymnasiumAdapter

        return GymnasiumAdapter(env_id, **config)
    if not entry.env:
        raise EnvConfigError(f"{env_id} is batched (one object steps every env): build it with make_vector")
    return make_suite_env(env_id, load_entry_point(entry.env), **{**entry.kwargs, **config})


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
