"""The robot agent: runs on the robot PC, drives hardware, enforces safety, streams to the trainer.

Never imports torch, ray, ``trainer`` or ``policies`` (checked by the layering test).
"""

from protos.grpc_log import quiet_grpc_core

quiet_grpc_core()
