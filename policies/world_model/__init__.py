"""Learned world models: an action-conditioned model of the next observation, reward and success,
trained from recorded LeRobot v3 episodes, and the vector env that runs policies inside one.

It lives beside the policies, not in ``sim_envs/``: it is a torch model batched on the trainer's
device, and ``sim_envs`` stays free of torch (the robot PC's twin imports it).
"""
