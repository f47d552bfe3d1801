"""A stand-in for the slice of the pylibfranka API the franka driver uses: a kinematic arm at ~1 kHz.

Imported by name in the driver's helper processes (``plf_module="tests.robot_agent.fake_pylibfranka"``),
so it is module-level, one arm per process. The arm follows each Cartesian / joint command exactly.
Joint motions move the TCP by the Panda's kinematics (Cartesian ones move the pose alone).
Like a real arm it trips a reflex, here when the TCP is pushed on past ``REFLEX_X`` (a stand-in for
a collision); it then refuses motion until ``automatic_error_recovery``.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import numpy as np

from protos.franka import PANDA
from robot_agent.drivers.franka import HOME_JOINTS
from robot_agent.drivers.homing import flange_pose

HOME_POSE = np.array(
    [[1, 0, 0, 0], [0, -1, 0, 0], [0, 0, -1, 0], [0.307, 0.0, 0.487, 1]], dtype=float
).reshape(-1)  # column-major O_T_EE: TCP pointing down at the sim twin's home
FLANGE_TO_TCP = np.linalg.inv(flange_pose(HOME_JOINTS, PANDA)) @ HOME_POSE.reshape(4, 4).T
REFLEX_X = 0.45
START_JOINTS_VARIABLE = "FAKE_FRANKA_START_JOINTS"
RealtimeConfig = SimpleNamespace(kIgnore="kIgnore", kEnforce="kEnforce")
ControllerMode = SimpleNamespace(CartesianImpedance="CartesianImpedance", JointImpedance="JointImpedance")


class ControlException(RuntimeError):
    pass


class IncompatibleVersionException(RuntimeError):
    pass


class _Arm:
    def __init__(self) -> None:
        # Where a person left the arm in guiding mode (the helper process inherits the variable).
        start = os.environ.get(START_JOINTS_VARIABLE)
        self.q = np.array([float(v) for v in start.split(",")] if start else HOME_JOINTS)
        self.pose = (flange_pose(self.q, PANDA) @ FLANGE_TO_TCP).T.reshape(-1)
        self.error: str | None = None


ARM = _Arm()


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


def _state():
    return SimpleNamespace(O_T_EE=ARM.pose.tolist(), q=ARM.q.tolist(), dq=[0.0] * 7)


class _Control:
    def __init__(self, kind: str) -> None:
        if ARM.error:
            raise ControlException(f"robot is in reflex mode ({ARM.error})")
        self.kind, self.finished = kind, False

    def readOnce(self):  # noqa: N802 (pylibfranka's name)
        time.sleep(0.001)
        if self.finished:
            raise ControlException("control is not running")
        if ARM.error:
            raise ControlException(f"Move command aborted: motion aborted by reflex! [{ARM.error}]")
        return _state(), Duration(0.001)

    def writeOnce(self, command):  # noqa: N802
        if self.kind == "cartesian":
            pose = np.asarray(command.O_T_EE, float)
            if pose[12] > REFLEX_X and pose[12] > ARM.pose[12]:  # pushing on into the 'obstacle'
                ARM.error = "cartesian_reflex"
            ARM.pose = pose
        else:
            ARM.q = np.asarray(command.q, float)
            ARM.pose = (flange_pose(ARM.q, PANDA) @ FLANGE_TO_TCP).T.reshape(-1)
        self.finished = command.motion_finished


class Robot:
    def __init__(self, host: str, realtime) -> None:
        if host == "10.255.255.1":
            raise ControlException("libfranka: Connection timeout")
        if host == "10.255.255.2":  # what libfranka says to an FR3 on system 5.9 with libfranka < 0.18
            raise IncompatibleVersionException(
                "libfranka: Incompatible library version (server version: 10, library version: 9). "
                "Please check https://frankarobotics.github.io for Panda system updates"
            )

    def read_once(self):
        return _state()

    def set_cartesian_impedance(self, stiffness) -> None:
        assert len(stiffness) == 6

    def start_cartesian_pose_control(self, mode):
        assert mode == "CartesianImpedance"
        return _Control("cartesian")

    def start_joint_position_control(self, mode):
        assert mode == "JointImpedance"
        return _Control("joint")

    def stop(self) -> None:
        ARM.error = ARM.error or "stopped"

    def automatic_error_recovery(self) -> None:
        ARM.error = None


class Gripper:
    """Grasping closes on a 3 cm object; moving goes to the width asked."""

    def __init__(self, host: str) -> None:
        self.width = 0.08

    def move(self, width, speed):
        self.width = width
        return True

    def grasp(self, width, speed, force, epsilon_inner, epsilon_outer):
        self.width = max(width, 0.03)
        return True

    def read_once(self):
        return SimpleNamespace(width=self.width, max_width=0.08)
