"""Learned world models: an action-conditioned model of the next observation, reward and success,
trained from recorded LeRobot v3 episodes, and the vector env that runs policies inside one.

It lives beside the policies, not in ``sim_envs/``: it is a torch model batched on the trainer's
device, and ``sim_envs`` stays free of torch (the robot PC's twin imports it).
"""

import gymnasium as _gym

from policies.world_model.env import WORLD_MODEL_ENV_ID

if WORLD_MODEL_ENV_ID not in _gym.registry:  # one env for gymnasium's tools; the trainer runs it batched
    _gym.register(id=WORLD_MODEL_ENV_ID, entry_point="policies.world_model.gym_env:WorldModelEnv")
