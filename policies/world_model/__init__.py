"""Learned world models: an action-conditioned model of the next observation, reward and success,
trained from recorded LeRobot v3 episodes, and the vector env that runs policies inside one.

It lives beside the policies, not in ``sim_envs/``: it is a torch model batched on the trainer's
device, and ``sim_envs`` stays free of torch (the robot PC's twin imports it).
"""

import gymnasium as _gym

from policies.world_model.env import WORLD_MODEL_ENV_ID
from sim_envs.registry import EnvEntry, register_env

ONE_ENV = "policies.world_model.gym_env:WorldModelEnv"
# The trainer runs it batched on its device; one env for gymnasium's tools.
register_env(
    WORLD_MODEL_ENV_ID,
    EnvEntry(ONE_ENV, vector_env="policies.world_model.env:WorldModelVectorEnv", imagined=True),
)
if WORLD_MODEL_ENV_ID not in _gym.registry:
    _gym.register(id=WORLD_MODEL_ENV_ID, entry_point=ONE_ENV)
