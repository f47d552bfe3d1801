"""A scripted expert on the sim twin: the "human" of DAgger and HG-DAgger runs and of demo collection.

It watches the simulator's object state (as a person watches the scene) and runs the task's scripted
controller every tick. Three modes:

- ``always``: it drives every tick (demonstrations);
- ``gated``: it takes over when the robot strays, for ``takeover_ticks`` ticks, then gives back
  (HG-DAgger). A tick strays when the gripper disagrees with the expert (open when it should close,
  closed when it should open), when the TCP moved away from the expert's command (cosine below
  ``min_alignment``, judged for commands >= ``min_command``), or when it stalls (moved less than
  ``min_motion_m``) while the expert wants a long move (command >= ``stall_command``): a robot that
  slows down near its target is not straying. ``patience`` straying ticks in a row trigger a
  take-over. While the task is in its success state the expert watches and never steps in;
- ``advise``: it never drives, but labels every tick with its action (DAgger).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_agent.teleop.base import TeleopDevice, TeleopError, TeleopReading

MODES = ("always", "gated", "advise")


@dataclass(frozen=True)
class ExpertConfig:
    mode: str = "gated"
    patience: int = 3
    takeover_ticks: int = 8
    min_command: float = 0.2  # expert translation command (in [-1, 1] units) that counts as "wants to move"
    min_motion_m: float = 0.002  # TCP motion per tick below which the robot stands still
    stall_command: float = 0.5  # standing still strays only when the expert wants to move at least this much
    min_alignment: float = 0.3  # cosine of (TCP motion, expert command) below which it goes astray
    gripper_margin_m: float = 0.005  # finger opening below the episode's start opening that counts as closing


class ExpertDevice(TeleopDevice):
    """The task's scripted controller as a teleop device (sim twin only)."""

    kind = "expert"

    def __init__(self, config: ExpertConfig) -> None:
        if config.mode not in MODES:
            raise TeleopError(f"expert mode must be one of {MODES}, got {config.mode!r}")
        if config.patience < 1 or config.takeover_ticks < 1:
            raise TeleopError("expert patience and takeover_ticks must be >= 1")
        self.config = config
        self.env = None
        self.controller = None
        self.start_episode()

    def bind(self, driver) -> None:
        env = getattr(driver, "env", None)
        if env is None or not hasattr(env, "privileged_state"):
            raise TeleopError(
                f"the expert device needs the sim-twin driver (it reads the simulator's object state); "
                f"got {type(driver).__name__}"
            )
        from sim_envs.scripted import scripted_policy  # lazy: only the sim twin has an expert

        self.env = env
        self.spec = env.privileged_spec()
        slices = self.spec.state_slices()
        self.tcp, self.width = slices["tcp_pos"], slices["gripper_width"]
        self.controller = scripted_policy(self.spec)

    def start_episode(self) -> None:
        if self.controller is not None:
            self.controller.reset()
        self.previous_tcp: np.ndarray | None = None
        self.previous_action: np.ndarray | None = None
        self.open_width: float | None = None
        self.straying = 0
        self.driving_left = 0

    def poll(self) -> TeleopReading:
        if self.controller is None:
            raise TeleopError("the expert device was polled before it was bound to a driver")
        state = self.env.privileged_state(perceived=False)  # a person sees the cube where it is
        action = self.controller.act({"state": state})
        tcp, width = state[self.tcp], float(state[self.width][0])
        if self.open_width is None:
            self.open_width = width  # episodes start with the gripper open
        takeover = self._takeover(tcp, width)
        self.previous_tcp, self.previous_action = tcp, action
        motion = np.zeros(6, np.float32)
        motion[:3] = action[:3]
        if self.spec.action.dim == 7:
            motion[3:6] = action[3:6]
        return TeleopReading(
            motion=motion,
            gripper_closed=bool(action[-1] < 0),
            takeover=takeover,
            advice=self.config.mode == "advise",
        )

    def _takeover(self, tcp: np.ndarray, width: float) -> bool:
        mode = self.config.mode
        if mode != "gated":
            return mode == "always"
        if self.driving_left > 0:
            self.driving_left -= 1
            return True
        if self.env.task.evaluate(self.env.scene).success:
            self.straying = 0  # the task is done as it stands: nothing to correct
            return False
        if self.previous_tcp is not None and self._strayed(
            tcp - self.previous_tcp, width, self.previous_action
        ):
            self.straying += 1
        else:
            self.straying = 0
        if self.straying >= self.config.patience:
            self.straying = 0
            self.driving_left = self.config.takeover_ticks - 1
            return True
        return False

    def _strayed(self, moved: np.ndarray, width: float, action: np.ndarray) -> bool:
        closing = width < self.open_width - self.config.gripper_margin_m
        if closing != bool(action[-1] < 0):
            return True
        command = action[:3]
        wanted = float(np.linalg.norm(command))
        if wanted < self.config.min_command:
            return False  # at a target (or closing the gripper): no direction to follow
        distance = float(np.linalg.norm(moved))
        if distance < self.config.min_motion_m:
            return wanted >= self.config.stall_command
        return float(moved @ command) / (distance * wanted) < self.config.min_alignment
