"""Simulators behind the shared env contract. Importing this registers the gymnasium ids.

import gymnasium as gym, sim_envs
env = gym.make("rlinf/FrankaPickLift-v0", cameras=())
"""

from sim_envs.rendering import select_gl_backend

select_gl_backend()  # must run before anything imports mujoco

import gymnasium as _gym  # noqa: E402

from sim_envs.registry import ENV_IDS, SUITE_IDS, make  # noqa: E402
from sim_envs.vector import make_vector  # noqa: E402

# No passive env checker: gymnasium >= 1.4's refuses an empty Dict space, which a state-only env
# (``cameras=()``) has under "images"; its other checks are covered by tests/sim_envs.
for _env_id, _kwargs in ENV_IDS.items():
    if _env_id not in _gym.registry:
        _gym.register(
            id=_env_id,
            entry_point="sim_envs.franka_env:FrankaEnv",
            kwargs=dict(_kwargs),
            disable_env_checker=True,
        )
for _env_id, _entry_point in SUITE_IDS.items():  # their simulators are imported when one is made
    if _env_id not in _gym.registry:
        _gym.register(id=_env_id, entry_point=_entry_point, disable_env_checker=True)

__all__ = ["ENV_IDS", "make", "make_vector"]
