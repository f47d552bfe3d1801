"""Simulators behind the shared env contract. Importing this registers the gymnasium ids.

import gymnasium as gym, sim_envs
env = gym.make("rlinf/FrankaPickLift-v0", cameras=())
"""

from sim_envs.rendering import select_gl_backend

select_gl_backend()  # must run before anything imports mujoco

import gymnasium as _gym  # noqa: E402

from sim_envs.registry import ENV_IDS, ENVS, EnvEntry, env_entry, make, register_env  # noqa: E402
from sim_envs.vector import make_vector  # noqa: E402

# No passive env checker: gymnasium >= 1.4's refuses an empty Dict space, which a state-only env
# (``cameras=()``) has under "images"; its other checks are covered by tests/sim_envs. Batched-only
# ids have no one-env class for gymnasium; a suite's simulator is imported only when one is made.
for _env_id, _entry in ENVS.items():
    if _entry.env and _env_id not in _gym.registry:
        _gym.register(
            id=_env_id, entry_point=_entry.env, kwargs=dict(_entry.kwargs), disable_env_checker=True
        )

__all__ = ["ENVS", "ENV_IDS", "EnvEntry", "env_entry", "make", "make_vector", "register_env"]
