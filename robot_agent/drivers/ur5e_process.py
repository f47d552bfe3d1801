"""The ur_rtde side of the ur5e driver, run in helper processes of its own (as the Franka's is).

The servo process owns ``RTDEControlInterface`` and ``RTDEReceiveInterface`` and runs the 500 Hz
loop UR's e-series controllers expect (``initPeriod`` / ``waitPeriod``): it publishes the measured
joints and TCP, moves a jerk-limited setpoint toward the driver's target
(:class:`~robot_agent.drivers.setpoint_filter.SetpointFilter`) and streams it with ``servoL``. A
protective or emergency stop the controller reports ends the stream and is sent to the driver as a
fault; ``recover`` unlocks a protective stop through the dashboard server. The Robotiq gripper's
blocking socket calls get a process of their own. State and target go through shared memory, commands
and faults through a pipe.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from protos.pose_math import matrix_to_rotvec, rotvec_to_matrix
from robot_agent.drivers.helpers import SharedBlock
from robot_agent.drivers.setpoint_filter import MotionLimits, SetpointFilter

# Shared arm state: q[6], qd[6], TCP pose[6] (x, y, z, rx, ry, rz), streaming, protective stop, e-stop, overruns.
STATE_SIZE = 6 + 6 + 6 + 4
TARGET_SIZE = 6  # the TCP target: x, y, z, rx, ry, rz
ROBOTIQ_PORT = 63352  # the Robotiq URCap's socket


@dataclass(frozen=True)
class ServoSettings:
    """How the servo process drives ``servoL`` (ur_rtde's parameters) and homes with ``moveJ``."""

    servo_hz: float  # the loop's rate: 500 on the e-series
    lookahead_time_s: float  # servoL's smoothing, 0.03-0.2 s
    gain: float  # servoL's proportional gain, 100-2000
    home_speed_rads: float  # moveJ's joint speed
    home_accel_rads2: float  # moveJ's joint acceleration


@dataclass(frozen=True)
class ServoModules:
    """The ur_rtde modules to import in the helper process (tests name a stand-in with their API)."""

    control: str = "rtde_control"
    receive: str = "rtde_receive"
    dashboard: str = "dashboard_client"


class _Servo:
    """Runs in the servo process: owns the RTDE interfaces."""

    def __init__(self, modules: ServoModules, host: str, limits: MotionLimits, settings: ServoSettings,
                 state: SharedBlock, target: SharedBlock, conn) -> None:  # fmt: skip
        self.modules, self.host = modules, host
        self.receive = importlib.import_module(modules.receive).RTDEReceiveInterface(host)
        self.control = importlib.import_module(modules.control).RTDEControlInterface(host)
        self.limits, self.settings, self.state, self.target, self.conn = limits, settings, state, target, conn
        self.streaming, self.setpoint, self.overruns = False, None, 0

    def stopped(self) -> str | None:
        if self.receive.isEmergencyStopped():
            return "emergency stop"
        if self.receive.isProtectiveStopped():
            return "protective stop"
        return None

    def publish(self) -> None:
        r = self.receive
        self.state.write([*r.getActualQ(), *r.getActualQd(), *r.getActualTCPPose(), float(self.streaming),
                          float(r.isProtectiveStopped()), float(r.isEmergencyStopped()), float(self.overruns)])  # fmt: skip

    def serve(self) -> None:
        period = 1.0 / self.settings.servo_hz
        last = time.monotonic()
        while True:
            start = self.control.initPeriod()
            now = time.monotonic()
            if now - last > 1.5 * period:
                self.overruns += 1
            last = now
            self.publish()
            if self.streaming:
                self.servo_step(period)
            if self.conn.poll():
                command, *args = self.conn.recv()
                if command == "close":
                    self.halt()
                    self.control.stopScript()
                    return
                try:
                    getattr(self, f"do_{command}")(*args)
                    self.conn.send(("reply", None))
                except Exception as exc:  # the vendor library raises its own types
                    self.conn.send(("reply", str(exc)))
            self.control.waitPeriod(start)

    def servo_step(self, period: float) -> None:
        reason = self.stopped()
        if reason is not None:
            self.streaming = False
            self.conn.send(("fault", reason))
            return
        target = self.target.read()
        self.setpoint.step(period, target[:3], rotvec_to_matrix(target[3:]))
        pose = [*self.setpoint.position, *matrix_to_rotvec(self.setpoint.rotation)]
        s = self.settings
        self.control.servoL(
            pose, 0.0, 0.0, period, s.lookahead_time_s, s.gain
        )  # speed / accel unused by servoL

    def halt(self) -> None:
        if self.streaming:
            self.control.servoStop()
            self.streaming = False

    def do_stream(self) -> None:
        """Start servoing from the measured TCP (the first target is where the arm is)."""
        reason = self.stopped()
        if reason is not None:
            raise RuntimeError(f"the arm is in {reason}")
        pose = np.asarray(self.receive.getActualTCPPose(), float)
        self.target.write(pose)
        self.setpoint = SetpointFilter(self.limits, pose[:3], rotvec_to_matrix(pose[3:]))
        self.streaming = True

    def do_hold(self) -> None:
        """Brake to the nearest point the profile can stop at."""
        if self.streaming:
            self.target.write([*self.setpoint.stopping_point(), *matrix_to_rotvec(self.setpoint.rotation)])

    def do_stop(self) -> None:
        self.halt()

    def do_home(self, joints: list[float], speed: float) -> None:
        self.halt()
        s = self.settings
        if self.control.moveJ(list(joints), min(speed, s.home_speed_rads), s.home_accel_rads2) is False:
            raise RuntimeError(f"moveJ to {np.round(joints, 3).tolist()} was refused")

    def do_recover(self) -> None:
        """Unlock a protective stop (UR asks for 5 s in it first); an e-stop needs a person."""
        if self.receive.isEmergencyStopped():
            raise RuntimeError("the arm is e-stopped: release the e-stop on the pendant")
        if self.receive.isProtectiveStopped():
            dashboard = importlib.import_module(self.modules.dashboard).DashboardClient(self.host)
            dashboard.connect()
            try:
                dashboard.closeSafetyPopup()
                dashboard.unlockProtectiveStop()
            finally:
                dashboard.disconnect()
            self.control.reuploadScript()

    def do_estop(self) -> None:
        self.halt()
        self.control.triggerProtectiveStop()


def servo_main(modules: ServoModules, host: str, limits: MotionLimits, settings: ServoSettings,
               state: SharedBlock, target: SharedBlock, conn) -> None:  # fmt: skip
    """Entry point of the servo process."""
    try:
        servo = _Servo(modules, host, limits, settings, state, target, conn)
        servo.publish()
    except Exception as exc:
        conn.send(("ready", f"cannot connect to the UR controller at {host}: {' '.join(str(exc).split())}"))
        return
    conn.send(("ready", None))
    servo.serve()


def gripper_main(module: str, host: str, config: Any, width, conn) -> None:
    """Entry point of the gripper process: a Robotiq on the UR's tool port (position 0 open, 255 closed)."""
    try:
        gripper = importlib.import_module(module).RobotiqGripper()
        gripper.connect(host, ROBOTIQ_PORT)
        gripper.activate()
        opening = float(config.gripper_max_width_m)
        width.value = opening * (1.0 - gripper.get_current_position() / 255.0)
    except Exception as exc:
        conn.send(("ready", f"cannot connect to the Robotiq gripper at {host}:{ROBOTIQ_PORT}: {exc}"))
        return
    conn.send(("ready", None))
    speed, force = int(config.gripper_speed), int(config.gripper_force)
    while True:
        if conn.poll(0.05):
            message = conn.recv()
            while conn.poll():  # only the newest request matters
                message = conn.recv()
            if message == "close":
                return
            closed = float(np.clip(1.0 - float(message) / opening, 0.0, 1.0))
            try:
                gripper.move(round(255 * closed), speed, force)
            except Exception as exc:
                conn.send(("fault", f"gripper: {exc}"))
        try:
            width.value = opening * (1.0 - gripper.get_current_position() / 255.0)
        except Exception as exc:
            conn.send(("fault", f"gripper: {exc}"))


__all__ = ["STATE_SIZE", "TARGET_SIZE", "ServoModules", "ServoSettings", "gripper_main", "servo_main"]
