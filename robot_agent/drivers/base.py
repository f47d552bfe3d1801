"""The driver interface: one small class per robot, called by the agent's control loop only."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from protos.embodiment import Embodiment
from protos.env_spec import EnvSpec
from robot_agent.safety import ArmScaling, SafetyConfig, TcpPose


class DriverError(RuntimeError):
    """The robot or its library reported a problem; the agent holds and reports it upstream."""


@dataclass(frozen=True)
class DriverCapabilities:
    """What a driver can do beyond moving: reset the scene itself, compute rewards, drive a gripper."""

    reset: bool = False
    reward: bool = False
    gripper: bool = True


@dataclass
class DriverObservation:
    """Proprioception plus the latest camera frames, each stamped with its capture time (monotonic ns)."""

    state: np.ndarray
    images: dict[str, np.ndarray]
    capture_ns: dict[str, int] = field(default_factory=dict)
    instruction: str = ""  # this episode's task text, where the driver knows it (else the spec's)


@dataclass(frozen=True)
class StepOutcome:
    """What one control period produced. Real robots leave reward/success to the trainer or a human."""

    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    success: bool = False


class RobotDriver(ABC):
    """A robot behind the env contract. ``apply`` and ``hold`` each cover one control period."""

    kind: str = ""
    spec: EnvSpec
    capabilities: DriverCapabilities
    arms: tuple[ArmScaling, ...]
    # The arm it drives (protos.embodiment): the agent's default workspace box comes from it. A driver
    # without one runs only with the box set in the agent's [safety] section.
    embodiment: Embodiment | None = None
    _safety_limits: SafetyConfig | None = None

    @abstractmethod
    def reset(self, seed: int | None = None) -> None:
        """Begin an episode: a sim twin resets its scene; a real arm moves to its home pose."""

    @abstractmethod
    def observe(self) -> DriverObservation:
        """The current state and the latest camera frames (never blocks on a camera)."""

    @abstractmethod
    def apply(self, action: np.ndarray) -> StepOutcome:
        """Carry out one already safety-checked action for one control period."""

    @abstractmethod
    def hold(self) -> None:
        """Keep the current pose (and gripper) for one control period."""

    @property
    def safety_limits(self) -> SafetyConfig:
        """The agent's limits, for motions a driver makes on its own (a real arm's homing); until the
        agent sets them, the defaults with this arm's own box."""
        if self._safety_limits is None:
            return SafetyConfig().for_embodiment(self.embodiment, f"driver {self.kind!r}")
        return self._safety_limits

    def set_safety_limits(self, config: SafetyConfig) -> None:
        self._safety_limits = config.for_embodiment(self.embodiment, f"driver {self.kind!r}")

    def tcp_targets(self) -> tuple[TcpPose, ...] | None:
        """Each arm's commanded TCP pose (what the next delta moves), or None to use the measured TCP."""
        return None

    def estop(self) -> None:
        """Stop as fast as the robot allows. The default holds; real drivers stop the controller."""
        self.hold()

    def close(self) -> None:  # noqa: B027  (optional hook)
        """Release hardware and threads."""

    def __enter__(self) -> RobotDriver:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
