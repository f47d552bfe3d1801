"""The trainer: sim-only training runs, the robot-facing server, env pools and algorithms."""
