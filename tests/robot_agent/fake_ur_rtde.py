"""A stand-in for the slice of ur_rtde's API the ur5e driver uses (``RTDEControlInterface``,
``RTDEReceiveInterface``, ``DashboardClient``) and for ur_rtde's ``robotiq_gripper`` client.

Imported by name in the driver's helper processes, so it is module-level, one arm per process. The
arm is kinematic: ``moveJ`` moves the joints and the TCP by the UR5e's DH chain; ``servoL`` moves
the TCP pose alone, exactly to each command. Like a real arm it latches a protective stop, here when
the TCP goes below ``TABLE_Z`` (a stand-in for hitting the table), refuses motion while stopped, and
is released by the dashboard's ``unlockProtectiveStop``. Every call is logged in ``ARM.calls``.
"""

from __future__ import annotations

import time

import numpy as np

from protos.pose_math import matrix_to_rotvec
from protos.ur5e import UR5E

TABLE_Z = 0.05


class _Arm:
    def __init__(self) -> None:
        self.q = np.array(UR5E.home_joints)
        self.tcp = self._tcp_of(self.q)
        self.protective = False
        self.calls: list[str] = []
        self.gripper_position = 0

    @staticmethod
    def _tcp_of(q) -> np.ndarray:
        transform = UR5E.forward_kinematics(q)
        return np.concatenate([transform[:3, 3], matrix_to_rotvec(transform[:3, :3])])


ARM = _Arm()


class RTDEReceiveInterface:
    def __init__(self, host: str) -> None:
        if host.startswith("10.255."):
            raise RuntimeError("timeout connecting to the RTDE interface")

    def getActualQ(self) -> list[float]:  # noqa: N802  (ur_rtde's names)
        return ARM.q.tolist()

    def getActualQd(self) -> list[float]:  # noqa: N802
        return [0.0] * 6

    def getActualTCPPose(self) -> list[float]:  # noqa: N802
        return ARM.tcp.tolist()

    def isProtectiveStopped(self) -> bool:  # noqa: N802
        return ARM.protective

    def isEmergencyStopped(self) -> bool:  # noqa: N802
        return False


class RTDEControlInterface:
    def __init__(self, host: str) -> None:
        self.period = 1.0 / 500

    def initPeriod(self) -> float:  # noqa: N802
        return time.monotonic()

    def waitPeriod(self, start: float) -> None:  # noqa: N802
        time.sleep(max(0.0, start + self.period - time.monotonic()))

    def servoL(self, pose, speed, acceleration, time_s, lookahead_time, gain) -> bool:  # noqa: N802
        if ARM.protective:
            return False
        ARM.tcp = np.asarray(pose, float)
        if ARM.tcp[2] < TABLE_Z:
            ARM.protective = True
            ARM.calls.append("protective stop")
        return True

    def servoStop(self) -> bool:  # noqa: N802
        ARM.calls.append("servoStop")
        return True

    def moveJ(self, q, speed, acceleration) -> bool:  # noqa: N802
        if ARM.protective:
            return False
        ARM.calls.append(f"moveJ speed={speed:.3f}")
        ARM.q = np.asarray(q, float)
        ARM.tcp = ARM._tcp_of(ARM.q)
        return True

    def triggerProtectiveStop(self) -> bool:  # noqa: N802
        ARM.protective = True
        ARM.calls.append("triggerProtectiveStop")
        return True

    def reuploadScript(self) -> bool:  # noqa: N802
        ARM.calls.append("reuploadScript")
        return True

    def stopScript(self) -> None:  # noqa: N802
        ARM.calls.append("stopScript")


class DashboardClient:
    def __init__(self, host: str) -> None:
        self.host = host

    def connect(self) -> None:
        pass

    def disconnect(self) -> None:
        pass

    def closeSafetyPopup(self) -> None:  # noqa: N802
        pass

    def unlockProtectiveStop(self) -> None:  # noqa: N802
        ARM.protective = False
        ARM.calls.append("unlockProtectiveStop")


class RobotiqGripper:
    def connect(self, host: str, port: int) -> None:
        pass

    def activate(self) -> None:
        pass

    def move(self, position: int, speed: int, force: int) -> tuple[bool, int]:
        ARM.gripper_position = int(np.clip(position, 0, 255))
        return True, ARM.gripper_position

    def get_current_position(self) -> int:
        return ARM.gripper_position
