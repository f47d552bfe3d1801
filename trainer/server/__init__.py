"""The trainer's robot-facing server: the robot link, robot sessions and episode intake."""
