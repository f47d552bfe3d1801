"""What every teleop device gives the agent, and how that becomes an action in the env's space.

A device is polled once per control tick and returns a :class:`TeleopReading`: a 6-DoF motion in
[-1, 1] (x, y, z, roll, pitch, yaw), the gripper command if one was given, whether the human is
driving this tick (or only advising: the expert's label while the policy drives), and an optional
success / failure label. A device that is gone raises
:class:`TeleopLost`; the control loop then holds the robot rather than let it drift.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

import numpy as np

from protos import EnvSpec
from protos.user_error import UserError

LABELS = ("success", "failure")


class TeleopError(UserError, RuntimeError):
    """A teleop device cannot be opened (missing library, no device, not a terminal)."""


class TeleopLost(TeleopError):
    """The device disappeared mid-use."""


@dataclass
class TeleopReading:
    """One poll of a device."""

    motion: np.ndarray = field(default_factory=lambda: np.zeros(6, np.float32))  # [-1, 1] x y z r p y
    gripper_closed: bool | None = None  # None: no gripper command this tick
    takeover: bool = False  # the human drives this tick
    label: str | None = None  # "success" / "failure": the operator ends the episode with a verdict
    # The motion is the expert's label for this state while the policy keeps driving (DAgger):
    # recorded as the human action, not executed.
    advice: bool = False
    start: bool = False  # the operator asks for the next episode (the scene is reset)


class TeleopDevice(abc.ABC):
    """One human input device."""

    kind: str = ""
    # A person at the robot resets the scene between episodes: ``rlinf-robot teleop`` waits for their
    # ``start`` before each one. Scripted and replayed devices start the next episode at once.
    waits_for_start: bool = False

    @abc.abstractmethod
    def poll(self) -> TeleopReading:
        """The device's state now. Raises :class:`TeleopLost` if it is gone."""

    def bind(self, driver) -> None:  # noqa: B027 (optional)
        """Called once with the robot's driver, before the first poll (an expert may watch the robot)."""

    def start_episode(self) -> None:  # noqa: B027 (optional)
        """Called when an episode starts."""

    def close(self) -> None:  # noqa: B027 (optional)
        """Release the device."""


class TeleopMapper:
    """Device motion -> the env's normalised action (ee-delta translation, rotation if any, gripper).

    Motion maps linearly onto the action bounds; the gripper keeps its last command until a new one
    comes. The agent's safety filter limits the result exactly as it limits the policy's actions.
    """

    def __init__(self, spec: EnvSpec, translation_gain: float = 1.0, rotation_gain: float = 1.0) -> None:
        names = spec.action.names
        if names[:3] != ("dx", "dy", "dz") or names[-1] != "gripper":
            raise TeleopError(
                f"teleop drives one arm's ee-delta action (dx dy dz [droll dpitch dyaw] gripper); this robot's "
                f"action is {list(names)}"
            )
        self.spec = spec
        self.has_rotation = "droll" in names
        self.low, self.high = spec.action.low_array(), spec.action.high_array()
        self.translation_gain, self.rotation_gain = translation_gain, rotation_gain
        self.gripper = 1.0  # +1 open, -1 closed (the env's convention)

    def to_action(self, reading: TeleopReading) -> np.ndarray:
        motion = np.clip(np.asarray(reading.motion, np.float32), -1.0, 1.0)
        if reading.gripper_closed is not None:
            self.gripper = -1.0 if reading.gripper_closed else 1.0
        action = np.zeros(self.spec.action.dim, np.float32)
        action[:3] = motion[:3] * self.translation_gain
        if self.has_rotation:
            action[3:6] = motion[3:6] * self.rotation_gain
        action[-1] = self.gripper
        return np.clip(action, self.low, self.high).astype(np.float32)
