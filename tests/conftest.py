"""Shared fixtures. ``sim_envs`` is imported first so that MuJoCo picks a headless GL backend."""

import sim_envs  # noqa: F401  (selects MUJOCO_GL before anything imports mujoco)
