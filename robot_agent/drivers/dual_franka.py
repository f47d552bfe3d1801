"""Two Franka arms driven by one agent: one concatenated action (left then right), one state vector."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from protos import franka
from protos.env_spec import ActionSpace, CameraSpec, EnvSpec, StateField
from robot_agent.cameras import Camera, CameraConfig, CameraError, make_camera
from robot_agent.drivers.base import (
    DriverCapabilities,
    DriverError,
    DriverObservation,
    RobotDriver,
    StepOutcome,
)
from robot_agent.drivers.franka import FrankaConfig, FrankaDriver
from robot_agent.safety import ArmScaling, SafetyConfig, TcpPose

ARMS = ("left", "right")


@dataclass(frozen=True)
class DualFrankaConfig:
    """Per-arm configs (their own ``cameras`` must be empty) plus the shared cameras."""

    left: FrankaConfig = field(default_factory=lambda: FrankaConfig(host="172.16.0.2"))
    right: FrankaConfig = field(default_factory=lambda: FrankaConfig(host="172.16.1.2"))
    cameras: tuple[CameraConfig, ...] = ()  # cameras shared by both arms
    control_hz: float = 10.0  # ticks per second of both arms
    instruction: str = ""  # the task's instruction
    max_episode_steps: int = 200  # the episode's horizon in ticks

    def __post_init__(self) -> None:
        for name in ARMS:
            arm = getattr(self, name)
            if isinstance(arm, dict):
                object.__setattr__(self, name, FrankaConfig(**arm))
        object.__setattr__(
            self,
            "cameras",
            tuple(c if isinstance(c, CameraConfig) else CameraConfig(**c) for c in self.cameras),
        )
        if self.left.cameras or self.right.cameras:
            raise ValueError("dual-franka: list cameras under the top-level 'cameras', not per arm")


class DualFrankaDriver(RobotDriver):
    """Splits each action between two :class:`FrankaDriver` s; names carry ``left_`` / ``right_`` prefixes."""

    kind = "dual-franka"
    embodiment = franka.PANDA

    def __init__(
        self,
        config: DualFrankaConfig | None = None,
        plf_module: str = "pylibfranka",
        camera_seams: dict | None = None,
    ) -> None:
        self.config = cfg = config or DualFrankaConfig()
        self.arm_drivers = [
            FrankaDriver(dataclasses.replace(getattr(cfg, name), control_hz=cfg.control_hz), plf_module)
            for name in ARMS
        ]
        single = self.arm_drivers[0].spec
        self._dim = single.action.dim
        self.spec = EnvSpec(
            name="franka/dual-real",
            cameras=tuple(CameraSpec(c.name, c.height, c.width, c.fps) for c in cfg.cameras),
            state_fields=tuple(
                StateField(f"{arm}_{f.name}", f.size) for arm in ARMS for f in single.state_fields
            ),
            action=ActionSpace(
                kind=single.action.kind,
                names=tuple(f"{arm}_{n}" for arm in ARMS for n in single.action.names),
                low=single.action.low * 2,
                high=single.action.high * 2,
            ),
            control_hz=cfg.control_hz,
            instruction=cfg.instruction,
            max_episode_steps=cfg.max_episode_steps,
            metadata={"robot": "dual-franka"},
        )
        self.capabilities = DriverCapabilities(reset=False, reward=False, gripper=True)
        self.arms = tuple(
            ArmScaling(d.config.max_translation_m, d.config.max_rotation_rad, prefix=f"{arm}_")
            for arm, d in zip(ARMS, self.arm_drivers)
        )
        self.cameras: list[Camera] = [
            make_camera(c, **(camera_seams or {}).get(c.name, {})) for c in cfg.cameras
        ]
        self._cameras_started = False

    def _split(self, action: np.ndarray) -> list[np.ndarray]:
        return [action[: self._dim], action[self._dim :]]

    def reset(self, seed: int | None = None) -> None:
        for driver in self.arm_drivers:
            driver.reset(seed)

    def observe(self) -> DriverObservation:
        if not self._cameras_started:
            for camera in self.cameras:
                camera.start()
            self._cameras_started = True
        readings = [driver.observe() for driver in self.arm_drivers]
        images, stamps = {}, {}
        for camera in self.cameras:
            try:
                frame = camera.read_latest(self.config.left.camera_max_age_s)
            except CameraError as exc:
                raise DriverError(str(exc)) from None
            images[camera.config.name], stamps[camera.config.name] = frame.image, frame.capture_ns
        return DriverObservation(np.concatenate([r.state for r in readings]), images, stamps)

    def apply(self, action: np.ndarray) -> StepOutcome:
        for driver, part in zip(self.arm_drivers, self._split(action)):
            driver.apply(part)
        return StepOutcome()

    def hold(self) -> None:
        for driver in self.arm_drivers:
            driver.hold()

    def set_safety_limits(self, config: SafetyConfig) -> None:
        for driver in self.arm_drivers:
            driver.set_safety_limits(config)

    def tcp_targets(self) -> tuple[TcpPose, ...] | None:
        targets = [driver.tcp_targets() for driver in self.arm_drivers]
        return None if any(t is None for t in targets) else tuple(t[0] for t in targets)

    def estop(self) -> None:
        for driver in self.arm_drivers:
            driver.estop()

    def close(self) -> None:
        for driver in self.arm_drivers:
            driver.close()
        for camera in self.cameras:
            camera.stop()
