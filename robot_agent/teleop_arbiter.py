"""Who drives this tick: the policy, or a human on a teleop device; and what the human says.

Polled once per episode tick by the control loop. A reading with ``takeover`` (or the agent in
teleop mode) makes the human's action the one that runs; ``advice`` is an expert's label of the
state while the policy drives (DAgger), never executed; ``label`` ends the episode as the operator
judged it. When the human hands back, the policy restarts from a fresh chunk.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from robot_agent.teleop import TeleopLost, TeleopMapper

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TeleopTick:
    action: np.ndarray | None = None  # the human's action, when the human drives this tick
    advice: np.ndarray | None = None  # the expert's label while the policy drives
    label: str | None = None  # "success" / "failure": the operator ended the episode
    lost_while_driving: bool = False  # the device vanished under the human's hands: hold and abort


class TeleopArbiter:
    """Wraps a teleop device (or none) and tracks whether the human holds the robot."""

    def __init__(self, device: Any, spec, on_hand_back) -> None:
        self.device = device
        self.mapper = TeleopMapper(spec) if device is not None else None
        self.on_hand_back = on_hand_back  # the control loop drops stale chunks and feeds the watchdog
        self.human_driving = False

    def start_episode(self) -> None:
        if self.device is not None:
            self.device.start_episode()

    def poll(self, teleop_mode: bool) -> TeleopTick:
        if self.device is None:
            return TeleopTick()
        try:
            reading = self.device.poll()
        except TeleopLost as exc:
            driving = self.human_driving or teleop_mode
            log.error("teleop device lost: %s", exc)
            self.device, self.human_driving = None, False
            return TeleopTick(lost_while_driving=driving)  # else the policy keeps driving
        driving = reading.takeover or teleop_mode
        if driving != self.human_driving:
            log.info("human %s", "takes over" if driving else "gives back")
            if not driving:
                self.on_hand_back()
        self.human_driving = driving
        action = self.mapper.to_action(reading) if driving else None
        advice = self.mapper.to_action(reading) if reading.advice and not driving else None
        return TeleopTick(action, advice, reading.label)
