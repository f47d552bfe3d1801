"""The trainer: sim-only training runs, the robot-facing server, env pools and algorithms."""

from protos.grpc_log import quiet_grpc_core

quiet_grpc_core()
