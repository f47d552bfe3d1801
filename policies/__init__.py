"""Policy models behind one interface: MLP/CNN now; VLAs (OpenVLA, pi0) and world models later."""

from policies.base import Policy, PolicyEvaluation, PolicyOutput, to_tensors
from policies.config import PolicyConfig
from policies.factory import load_policy, make_policy

__all__ = [
    "Policy",
    "PolicyConfig",
    "PolicyEvaluation",
    "PolicyOutput",
    "load_policy",
    "make_policy",
    "to_tensors",
]
