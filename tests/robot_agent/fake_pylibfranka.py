"""A stand-in for the slice of the pylibfranka API the franka driver uses: a kinematic arm at ~1 kHz.

The arm follows each written Cartesian / joint command exactly, records every command, and can be
told to raise a reflex error, the way libfranka raises a ``ControlException``.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np

HOME_POSE = np.array(
    [[1, 0, 0, 0], [0, -1, 0, 0], [0, 0, -1, 0], [0.307, 0.0, 0.487, 1]], dtype=float
).reshape(-1)  # column-major O_T_EE: TCP pointing down at the sim twin's home


class Duration:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def to_sec(self) -> float:
        return self.seconds


class CartesianPose:
    def __init__(self, pose16) -> None:
        self.O_T_EE = list(pose16)
        self.motion_finished = False


class JointPositions:
    def __init__(self, q) -> None:
        self.q = list(q)
        self.motion_finished = False


class ReflexError(RuntimeError):
    pass


class FakeArm:
    """Shared state of one simulated arm (what the robot 'is')."""

    def __init__(self) -> None:
        self.pose = HOME_POSE.copy()
        self.q = np.zeros(7)
        self.cartesian_commands: list[np.ndarray] = []
        self.joint_commands: list[np.ndarray] = []
        self.fail_next_read: str | None = None
        self.stopped = False
        self.recovered = 0
        self.impedance = None
        self.lock = threading.Lock()


class _Control:
    def __init__(self, arm: FakeArm, kind: str) -> None:
        self.arm, self.kind = arm, kind
        self.finished = False

    def readOnce(self):  # noqa: N802 (pylibfranka's name)
        time.sleep(0.001)
        if self.arm.fail_next_read:
            message, self.arm.fail_next_read = self.arm.fail_next_read, None
            raise ReflexError(message)
        if self.arm.stopped or self.finished:
            raise ReflexError("control is not running")
        state = SimpleNamespace(O_T_EE=self.arm.pose.tolist(), q=self.arm.q.tolist(), dq=[0.0] * 7)
        return state, Duration(0.001)

    def writeOnce(self, command):  # noqa: N802
        with self.arm.lock:
            if self.kind == "cartesian":
                self.arm.pose = np.asarray(command.O_T_EE, float)
                self.arm.cartesian_commands.append(self.arm.pose.copy())
            else:
                self.arm.q = np.asarray(command.q, float)
                self.arm.joint_commands.append(self.arm.q.copy())
        self.finished = command.motion_finished


class FakeRobot:
    def __init__(self, arm: FakeArm, host: str, realtime) -> None:
        self.arm, self.host = arm, host

    def read_once(self):
        return SimpleNamespace(O_T_EE=self.arm.pose.tolist(), q=self.arm.q.tolist(), dq=[0.0] * 7)

    def set_cartesian_impedance(self, stiffness) -> None:
        self.arm.impedance = list(stiffness)

    def start_cartesian_pose_control(self, mode):
        assert mode == "CartesianImpedance"
        return _Control(self.arm, "cartesian")

    def start_joint_position_control(self, mode):
        assert mode == "JointImpedance"
        return _Control(self.arm, "joint")

    def stop(self) -> None:
        self.arm.stopped = True

    def automatic_error_recovery(self) -> None:
        self.arm.recovered += 1


class FakeGripper:
    def __init__(self, host: str) -> None:
        self.width = 0.08
        self.calls: list[tuple] = []

    def move(self, width, speed):
        self.calls.append(("move", round(width, 4)))
        self.width = width
        return True

    def grasp(self, width, speed, force, epsilon_inner, epsilon_outer):
        self.calls.append(("grasp", round(width, 4), force))
        self.width = max(width, 0.03)  # an object 3 cm wide is in the way
        return True

    def read_once(self):
        return SimpleNamespace(width=self.width, max_width=0.08)


def make_fake_pylibfranka(arm: FakeArm) -> SimpleNamespace:
    grippers: list[FakeGripper] = []

    def gripper(host):
        grippers.append(FakeGripper(host))
        return grippers[-1]

    return SimpleNamespace(
        Robot=lambda host, realtime: FakeRobot(arm, host, realtime),
        Gripper=gripper,
        grippers=grippers,
        RealtimeConfig=SimpleNamespace(kIgnore="kIgnore", kEnforce="kEnforce"),
        ControllerMode=SimpleNamespace(
            CartesianImpedance="CartesianImpedance", JointImpedance="JointImpedance"
        ),
        CartesianPose=CartesianPose,
        JointPositions=JointPositions,
    )
