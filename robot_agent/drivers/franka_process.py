"""The libfranka side of the franka driver, run in helper processes of its own.

pylibfranka's blocking calls keep the GIL. Measured against franka-sim: while a 1 kHz ``readOnce``
loop ran in a thread, the other threads of that process got 16 % of their usual throughput and a
10 ms sleep overshot by up to 230 ms, so the agent's link starved and the arm lost cycles
(``communication_constraints_violation``). So the 1 kHz arm loop and the (blocking) gripper calls
each live in a process, and talk to the driver through shared memory (state, target) and a pipe
(commands, replies, faults).
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import numpy as np

from protos.pose_math import pose_from_column_major, pose_to_column_major
from robot_agent.drivers.helpers import SharedBlock
from robot_agent.drivers.setpoint_filter import SetpointFilter

# Shared arm state: q[7], dq[7], O_T_EE[16] (column-major), moving, overruns.
STATE_SIZE = 7 + 7 + 16 + 2
TARGET_SIZE = 16


def _seconds(period: Any) -> float:
    """libfranka's ``Duration`` (``to_sec()``, or ``to_msec()``) -> seconds."""
    if hasattr(period, "to_sec"):
        return float(period.to_sec())
    if hasattr(period, "to_msec"):
        return float(period.to_msec()) / 1000.0
    return float(period)


class _Arm:
    """Runs in the arm process: owns the pylibfranka ``Robot``."""

    def __init__(
        self, plf: Any, host: str, config: Any, state: SharedBlock, target: SharedBlock, conn
    ) -> None:
        self.plf, self.config, self.state, self.target, self.conn = plf, config, state, target, conn
        self.robot = plf.Robot(host, plf.RealtimeConfig.kIgnore)
        self.robot.set_cartesian_impedance(list(config.cartesian_stiffness))
        self.overruns = 0

    def publish(self, robot_state: Any, moving: bool) -> None:
        self.state.write(
            [*robot_state.q, *robot_state.dq, *robot_state.O_T_EE, float(moving), float(self.overruns)]
        )

    def serve(self) -> None:
        while True:
            if not self.conn.poll(0.01):
                self.publish(self.robot.read_once(), moving=False)
                continue
            command, *args = self.conn.recv()
            if command == "close":
                return
            try:
                if not getattr(self, f"do_{command}")(*args):
                    self.conn.send(("reply", None))
            except Exception as exc:  # the vendor library raises its own types
                self.conn.send(("reply", str(exc)))

    def do_stream(self) -> bool:
        """Start Cartesian impedance control; it runs until a ``stop`` / ``estop`` arrives or a reflex.

        Replies once started; the stop request is answered when the motion has finished.
        """
        control = self.robot.start_cartesian_pose_control(self.plf.ControllerMode.CartesianImpedance)
        robot_state, _ = control.readOnce()
        # Start from the last *commanded* pose: the measured one differs by the impedance tracking
        # error, and a first command that jumps by it is refused as a discontinuity.
        start = getattr(robot_state, "O_T_EE_c", None) or robot_state.O_T_EE
        position, rotation = pose_from_column_major(start)
        self.target.write(start)
        setpoint = SetpointFilter(self.config.motion_limits, position, rotation)
        self.publish(robot_state, moving=True)
        self.conn.send(("reply", None))  # started: the driver may now move the target
        try:
            while True:
                robot_state, period = control.readOnce()
                dt = _seconds(period) or 0.001
                if dt > 0.0015:
                    self.overruns += 1
                self.publish(robot_state, moving=True)
                setpoint.step(dt, *pose_from_column_major(self.target.read()))
                command = self.plf.CartesianPose(pose_to_column_major(setpoint.position, setpoint.rotation))
                request = self.conn.recv()[0] if self.conn.poll() else None
                if request == "hold":  # brake to the nearest point the profile can stop at
                    self.target.write(pose_to_column_major(setpoint.stopping_point(), setpoint.rotation))
                    self.conn.send(("reply", None))
                    request = None
                command.motion_finished = request is not None
                control.writeOnce(command)
                if request is not None:
                    if request == "estop":
                        self.robot.stop()
                    self.conn.send(("reply", None))
                    return True
        except Exception as exc:
            self.conn.send(("fault", str(exc)))
        finally:
            self.publish(self.robot.read_once(), moving=False)
        return True

    def do_hold(self) -> None:
        """Nothing is streaming: the arm already holds."""

    def do_stop(self) -> None:
        """Nothing is streaming (a fault ended it first): stopping is already done."""

    def do_home(self, joints: list[float], duration_s: float) -> None:
        control = self.robot.start_joint_position_control(self.plf.ControllerMode.JointImpedance)
        robot_state, _ = control.readOnce()
        start, goal = np.asarray(robot_state.q, float), np.asarray(joints, float)
        elapsed = 0.0
        while True:
            robot_state, period = control.readOnce()
            elapsed += _seconds(period) or 0.001
            phase = min(elapsed / duration_s, 1.0)
            blend = 0.5 * (1.0 - math.cos(math.pi * phase))  # zero velocity at both ends
            command = self.plf.JointPositions((start + blend * (goal - start)).tolist())
            command.motion_finished = phase >= 1.0
            control.writeOnce(command)
            self.publish(robot_state, moving=False)
            if phase >= 1.0:
                self.publish(self.robot.read_once(), moving=False)  # where the motion ended
                return

    def do_recover(self) -> None:
        self.robot.automatic_error_recovery()

    def do_estop(self) -> None:
        self.robot.stop()


def connect_error(what: str, host: str, exc: Exception, plf_name: str) -> str:
    """One line for a failed connect; a server version the library does not speak says what to install."""
    text = " ".join(str(exc).split())
    if "incompatible" in text.lower() and "version" in text.lower():
        try:
            from importlib.metadata import version

            installed = version(plf_name.split(".")[0])
        except Exception:
            installed = "unknown"
        return (
            f"the {what} at {host} speaks another protocol version than {plf_name} {installed} ({text}); "
            "FR3 and Franka system 5.9+ need pylibfranka >= 0.18: pip install -U 'pylibfranka>=0.18'"
        )
    return f"cannot connect to the {what} at {host}: {text}"


def arm_main(plf_name: str, host: str, config: Any, state: SharedBlock, target: SharedBlock, conn) -> None:
    """Entry point of the arm process."""
    try:
        arm = _Arm(importlib.import_module(plf_name), host, config, state, target, conn)
        arm.publish(arm.robot.read_once(), moving=False)
    except Exception as exc:
        conn.send(("ready", connect_error("Franka", host, exc, plf_name)))
        return
    conn.send(("ready", None))
    arm.serve()


def gripper_main(plf_name: str, host: str, config: Any, width, conn) -> None:
    """Entry point of the gripper process: ``move`` to open, ``grasp`` (with force) to close."""
    try:
        gripper = importlib.import_module(plf_name).Gripper(host)
        width.value = float(gripper.read_once().width)
    except Exception as exc:
        conn.send(("ready", connect_error("Franka gripper", host, exc, plf_name)))
        return
    conn.send(("ready", None))
    commanded = None
    while True:
        if conn.poll(0.1):
            message = conn.recv()
            if message == "close":
                return
            while conn.poll():  # only the newest request matters
                message = conn.recv()
                if message == "close":
                    return
            wanted = float(message)
            try:
                if commanded is None or abs(wanted - commanded) > config.gripper_tolerance_m:
                    commanded = wanted
                    if wanted < 0.5 * config.gripper_max_width_m:
                        gripper.grasp(wanted, config.gripper_speed_mps, config.gripper_force_n, 0.08, 0.08)
                    else:
                        gripper.move(wanted, config.gripper_speed_mps)
            except Exception as exc:
                conn.send(("fault", f"gripper: {exc}"))
        try:
            width.value = float(gripper.read_once().width)
        except Exception as exc:
            conn.send(("fault", f"gripper: {exc}"))


__all__ = ["STATE_SIZE", "TARGET_SIZE", "SharedBlock", "arm_main", "gripper_main"]
