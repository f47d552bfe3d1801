"""Contracts shared by every part of the stack: the env spec, observation layout and validation.

Pure Python + numpy: the robot agent imports this on a robot PC.
"""

from protos.env_spec import (
    ACTION_KINDS,
    EE_DELTA_POSE_GRIPPER,
    JOINT_POSITION,
    ActionSpace,
    CameraSpec,
    EnvSpec,
    StateField,
    ee_delta_action_space,
)
from protos.validation import ContractError, validate_action, validate_observation

__all__ = [
    "ACTION_KINDS",
    "EE_DELTA_POSE_GRIPPER",
    "JOINT_POSITION",
    "ActionSpace",
    "CameraSpec",
    "ContractError",
    "EnvSpec",
    "StateField",
    "ee_delta_action_space",
    "validate_action",
    "validate_observation",
]
