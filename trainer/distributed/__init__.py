"""Training on Ray: env / rollout / actor workers, their placement, and the pipelined PPO loop."""
