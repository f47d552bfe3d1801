"""Guided capture: the same loop moves the sim rig unattended, or a real robot after confirmation.

A rig is anything with ``move_tcp(T) -> T_reached``, ``render(camera) -> image`` (or ``capture``)
and ``tcp_pose()``: :class:`~calibration.sim_target.SimCalibrationRig` in the MuJoCo scene, or
:class:`DriverRig`, a robot driver from ``robot_agent`` plus one of its cameras.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from calibration.board import BoardSpec, CalibrationError, detect
from calibration.hand_eye import board_pose, make_transform
from calibration.intrinsics import Intrinsics

Confirm = Callable[[str], bool]


def always(_: str) -> bool:
    return True


def ask(prompt: str) -> bool:
    """Ask a person at the robot; 'q' stops the capture."""
    answer = input(f"{prompt} [Enter = yes, s = skip, q = quit] ").strip().lower()
    if answer == "q":
        raise KeyboardInterrupt
    return answer != "s"


def guided_capture(
    rig, camera: str, poses: list[np.ndarray], intrinsics: Intrinsics, spec: BoardSpec,
    confirm: Confirm = always, on_gripper: np.ndarray | None = None, settle_s: float = 0.0,
) -> tuple[list[np.ndarray], list[np.ndarray], list[str]]:  # fmt: skip
    """Visit ``poses``; return the reached TCP poses, the board poses seen, and why poses were skipped.

    ``confirm`` is asked before every move (a real robot asks a person; the sim does not).
    ``on_gripper`` places the board relative to the TCP after each move (eye-to-hand, sim only).
    """
    robot, boards, skipped = [], [], []
    for index, target in enumerate(poses):
        where = ", ".join(f"{v:.3f}" for v in target[:3, 3])
        if not confirm(f"pose {index + 1}/{len(poses)}: move the TCP to ({where}) m?"):
            skipped.append(f"pose {index + 1}: skipped by the operator")
            continue
        reached = rig.move_tcp(target)
        if on_gripper is not None:
            rig.set_board_pose(reached @ on_gripper)
        if settle_s:
            time.sleep(settle_s)
        try:
            detection = detect(rig.render(camera), spec)
        except CalibrationError as exc:
            skipped.append(f"pose {index + 1}: {exc}")  # a pose that loses the board is skipped
            continue
        robot.append(reached)
        boards.append(board_pose(detection, intrinsics))
    return robot, boards, skipped


def quat_to_matrix(quat) -> np.ndarray:
    """Unit quaternion (w, x, y, z) -> rotation matrix."""
    w, x, y, z = np.asarray(quat, float) / np.linalg.norm(quat)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


class DriverRig:
    """A robot driver (``tcp_pos`` / ``tcp_quat`` state, end-effector delta actions) and a camera.

    Moves are closed loop through the driver's own action space and the agent's safety filter, one
    control period at a time, until the TCP is within ``tolerance`` of the target.
    """

    def __init__(
        self, driver, cameras: dict, safety=None, tolerance_m: float = 0.002, tolerance_deg: float = 0.5
    ) -> None:
        from robot_agent.safety import SafetyConfig, SafetyFilter

        self.driver, self.cameras = driver, cameras
        self.safety = SafetyFilter(driver.spec, driver.arms, safety or SafetyConfig(), driver.embodiment)
        self.tolerance_m, self.tolerance_deg = tolerance_m, tolerance_deg
        self._slices = driver.spec.state_slices()
        self._scale = driver.arms[0]

    def tcp_pose(self) -> np.ndarray:
        state = self.driver.observe().state
        return make_transform(quat_to_matrix(state[self._slices["tcp_quat"]]), state[self._slices["tcp_pos"]])

    def move_tcp(self, target: np.ndarray, timeout_s: float = 20.0) -> np.ndarray:
        import cv2

        period = 1.0 / self.driver.spec.control_hz
        deadline = time.monotonic() + timeout_s
        while True:
            observation = self.driver.observe()
            current = self.tcp_pose()
            error = target[:3, 3] - current[:3, 3]
            rotvec = cv2.Rodrigues(target[:3, :3] @ current[:3, :3].T)[0].reshape(3)
            if (
                np.linalg.norm(error) < self.tolerance_m
                and np.degrees(np.linalg.norm(rotvec)) < self.tolerance_deg
            ):
                return current
            if time.monotonic() > deadline:
                raise CalibrationError(
                    f"could not reach the pose within {timeout_s:g} s (off by {np.linalg.norm(error) * 1000:.1f} mm): "
                    "is it inside the safety workspace?"
                )
            # Deltas move the commanded target (which may lead the TCP): close the gap from there.
            targets = self.driver.tcp_targets()
            step = target[:3, 3] - (targets[0].position if targets is not None else current[:3, 3])
            action = np.zeros(self.driver.spec.action.dim, np.float32)
            action[:3] = np.clip(step / self._scale.max_translation_m, -1, 1)
            action[3:6] = np.clip(0.5 * rotvec / self._scale.max_rotation_rad, -1, 1)
            action[-1] = 1.0  # gripper open
            safe, _ = self.safety.limit(action, observation.state, None, self.driver.tcp_targets())
            self.driver.apply(safe)
            time.sleep(period)

    def render(self, camera: str) -> np.ndarray:
        return self.cameras[camera]()
