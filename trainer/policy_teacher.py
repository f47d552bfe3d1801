"""A trained state policy as the demonstrator for an image policy (teacher-student distillation).

RL learns fastest from the privileged state (the cube's pose), but a robot's policy has to see the
cube through its cameras. :class:`PolicyTeacher` lets a state policy trained in a sim play the
demonstrations an image policy is then cloned from (``rlinf-trainer demos --teacher``, then BC):
the env is configured as the *student* sees it (cameras, proprioception), and the teacher reads
what it was trained on, the privileged state as the env's perception reports it, plus the action
last applied when its spec has one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from protos.batch import stack_obs
from protos.env_spec import PREVIOUS_ACTION
from protos.user_error import UserError


class TeacherError(UserError, ValueError):
    """A teacher that cannot act in this env, in one line."""


class PolicyTeacher:
    """Greedy actions of the state policy saved at ``path`` for ``env`` (a Franka sim env, whatever
    it shows its own policy)."""

    def __init__(self, path: str | Path, env) -> None:
        from policies import load_policy

        if not (Path(path) / "policy.json").is_file():
            raise TeacherError(f"teacher {path}: not a saved policy folder (no policy.json)")
        self.policy = load_policy(path).eval()
        spec = self.policy.spec
        if self.policy.cameras:
            raise TeacherError(
                f"teacher {path} looks at cameras {self.policy.cameras}; a teacher reads the state"
            )
        if not hasattr(env, "privileged_state"):
            raise TeacherError(f"env {env.env_spec.name!r} has no privileged state for a teacher to read")
        self.with_previous_action = PREVIOUS_ACTION in spec.state_slices()
        expected = env.privileged_spec().state_dim + (spec.action.dim if self.with_previous_action else 0)
        if spec.state_dim != expected or spec.action.dim != env.env_spec.action.dim:
            raise TeacherError(
                f"teacher {path} was trained on {spec.state_dim} state dims and {spec.action.dim}-D actions; "
                f"this env's privileged state gives {expected} and takes {env.env_spec.action.dim}-D actions"
            )

    def state(self, env) -> np.ndarray:
        """What the teacher was trained to read: the privileged state (as perceived), then the
        previous action if its spec ends with one."""
        state = env.privileged_state()
        if self.with_previous_action:
            state = np.concatenate([state, env.previous_action])
        return state.astype(np.float32)

    @torch.no_grad()
    def __call__(self, env) -> np.ndarray:
        obs = stack_obs([{"state": self.state(env), "images": {}, "instruction": ""}])
        return self.policy.act(obs, mode="greedy").actions[0, 0].cpu().numpy().astype(np.float32)
