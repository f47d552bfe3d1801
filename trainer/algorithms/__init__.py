"""RL algorithms, one readable file each: PPO, GRPO, SAC, RLPD."""
