"""The sim twin: a ``sim_envs`` task run in-process as if it were the robot (what CI and tests use).

The domain-randomisation knobs are its "reality gap" (``randomization="reality_gap"`` by default),
and by default it has no privileged state: it shows the trainer exactly what a real arm would.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from robot_agent.drivers.base import (
    DriverCapabilities,
    DriverError,
    DriverObservation,
    RobotDriver,
    StepOutcome,
)
from robot_agent.safety import ArmScaling, TcpPose

RANDOMIZATION_PRESETS = ("reality_gap", "none")


@dataclass(frozen=True)
class SimTwinConfig:
    """Which task the twin runs and how it looks. ``randomization`` is a preset name or a dict."""

    task: str = "pick_lift"  # the tabletop task the twin runs (reach, push, pick_lift, pick_color)
    robot: str = "panda"  # the arm it stands in for: panda or ur5e (its embodiment sets the safety defaults)
    control_hz: float = 10.0  # ticks per second
    cameras: tuple[str, ...] = ("front", "wrist")  # front and / or wrist
    image_size: int = 128  # camera frames' side in pixels
    # reality_gap (friction x0.7, mass x1.5, gain x0.8, 40 ms), none, or a dict of ranges
    randomization: str | dict = "reality_gap"
    reward_type: str = "dense"  # dense or sparse
    max_episode_steps: int = 0  # 0: the task's own horizon
    # True: the state also carries the task's object poses, standing in for a perception module
    # (lets state policies learn on the twin; a real arm shows proprioception only).
    privileged_state: bool = False
    # False: 4-D actions (translation + gripper), as the embedded default policy (ppo_pick_lift) uses.
    action_rotation: bool = True
    # What a full action moves the TCP by per step, as a real arm's driver config says (0: the sim's own).
    max_translation_m: float = 0.0
    max_rotation_rad: float = 0.0  # see max_translation_m
    # False: reward 0 and never success or terminated, as a real arm reports (the trainer's reward
    # source, e.g. a success classifier, has to judge the episode).
    report_reward: bool = True


class SimTwinDriver(RobotDriver):
    """Drives a MuJoCo tabletop task through the same driver interface as a real arm."""

    kind = "sim-twin"

    def __init__(self, config: SimTwinConfig | None = None) -> None:
        import sim_envs  # lazy: a robot PC without the sim extra never needs MuJoCo
        from sim_envs.franka_env import FrankaEnv, FrankaEnvConfig
        from sim_envs.randomization import REALITY_GAP

        self.config = config or SimTwinConfig()
        del sim_envs
        randomization: Any = self.config.randomization
        if isinstance(randomization, str):
            if randomization not in RANDOMIZATION_PRESETS:
                raise ValueError(f"sim-twin randomization must be one of {RANDOMIZATION_PRESETS} or a dict")
            randomization = REALITY_GAP if randomization == "reality_gap" else None
        env_config = FrankaEnvConfig.from_overrides(
            task=self.config.task,
            robot=self.config.robot,
            control_hz=self.config.control_hz,
            cameras=self.config.cameras,
            image_height=self.config.image_size,
            image_width=self.config.image_size,
            reward_type=self.config.reward_type,
            privileged_state=self.config.privileged_state,
            action_rotation=self.config.action_rotation,
            randomization=randomization,  # type: ignore[arg-type]  (from_overrides converts a dict)
            max_episode_steps=1_000_000_000,  # the agent truncates at the spec's horizon, not the env
            **{name: value for name in ("max_translation_m", "max_rotation_rad")
               if (value := getattr(self.config, name))},
        )  # fmt: skip
        self.env = FrankaEnv(config=env_config)
        self.embodiment = self.env.embodiment
        horizon = self.config.max_episode_steps or self.env.task.max_episode_steps
        self.spec = dataclasses.replace(
            self.env.env_spec, max_episode_steps=horizon, metadata={**self.env.env_spec.metadata, "twin": "1"}
        )
        self.capabilities = DriverCapabilities(reset=True, reward=self.config.report_reward, gripper=True)
        self.arms = (ArmScaling(env_config.max_translation_m, env_config.max_rotation_rad),)
        self._hold_action = np.zeros(self.spec.action.dim, dtype=np.float32)
        self._obs: dict | None = None
        self._stamp = 0
        self._holding = False
        # No rendering here: GL contexts belong to the thread that first renders (the control loop's).

    def reset(self, seed: int | None = None) -> None:
        self._obs, _ = self.env.reset(seed=seed)
        self._stamp = time.monotonic_ns()
        self._hold_action[:] = 0.0
        self._hold_action[-1] = 1.0  # the env resets with the gripper open

    def observe(self) -> DriverObservation:
        if self._obs is None:
            self.reset(seed=0)
        assert self._obs is not None
        stamps = dict.fromkeys(self._obs["images"], self._stamp)
        return DriverObservation(self._obs["state"], self._obs["images"], stamps, self._obs["instruction"])

    def apply(self, action: np.ndarray) -> StepOutcome:
        self._obs, reward, terminated, _, info = self.env.step(action)
        self._holding = False
        self._stamp = time.monotonic_ns()
        self._hold_action[-1] = action[-1]
        if info.get("physics_unstable"):
            # MuJoCo blew up and reset its state: a fault, as a real arm's reflex is, not an outcome.
            raise DriverError("the twin's physics went unstable (MuJoCo reset its state)")
        if not self.config.report_reward:
            return StepOutcome()
        return StepOutcome(float(reward), bool(terminated), False, bool(info.get("success", False)))

    def hold(self) -> None:
        if not self._holding:
            self.env.hold_current_pose()  # stop where the arm is, not where the last target led
            self._holding = True
        self._obs, *_ = self.env.step(self._hold_action)  # zero deltas: the target stays put
        self._stamp = time.monotonic_ns()

    def tcp_targets(self) -> tuple[TcpPose, ...]:
        return (TcpPose(*self.env.commanded_tcp_pose()),)

    def close(self) -> None:
        self.env.close()
