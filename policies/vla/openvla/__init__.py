"""OpenVLA (Prismatic) as upstream publishes it: the checkpoint folder, its exact action tokens, RL on it."""
