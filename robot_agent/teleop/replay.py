"""A recorded device trace played back tick by tick: the "human" in tests and demos.

The trace is JSON lines, one per control tick:
``{"motion": [x, y, z, roll, pitch, yaw], "gripper": "close" | "open" | null, "takeover": true, "label": null,
"start": false}`` (missing keys take their defaults). With ``waits_for_start`` the trace is played like a
person's device: ``rlinf-robot teleop`` consumes lines between episodes until one has ``start``. When
the trace runs out the device either lets go (``on_end="release"``) or behaves like an unplugged
device (``on_end="disconnect"``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robot_agent.teleop.base import LABELS, TeleopDevice, TeleopError, TeleopLost, TeleopReading


@dataclass(frozen=True)
class ReplayConfig:
    path: str = ""
    on_end: str = "release"  # or "disconnect"
    waits_for_start: bool = False  # played like a person's device: episodes start on a "start" line


def parse_trace_line(line: str, number: int) -> TeleopReading:
    try:
        entry = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TeleopError(f"trace line {number}: not JSON ({exc.msg})") from None
    motion = np.asarray(entry.get("motion", [0.0] * 6), np.float32)
    if motion.shape != (6,) or not np.isfinite(motion).all():
        raise TeleopError(f"trace line {number}: motion must be 6 finite numbers, got {entry.get('motion')}")
    gripper = entry.get("gripper")
    if gripper not in (None, "open", "close"):
        raise TeleopError(f"trace line {number}: gripper must be 'open', 'close' or null, got {gripper!r}")
    label = entry.get("label")
    if label not in (None, *LABELS):
        raise TeleopError(f"trace line {number}: label must be one of {LABELS} or null, got {label!r}")
    return TeleopReading(
        motion=motion,
        gripper_closed=None if gripper is None else gripper == "close",
        takeover=bool(entry.get("takeover", True)),
        label=label,
        start=bool(entry.get("start", False)),
    )


def write_trace(path: str | Path, readings: list[TeleopReading]) -> None:
    """Save readings as a trace file (what the replay device plays)."""
    lines = []
    for r in readings:
        gripper = None if r.gripper_closed is None else ("close" if r.gripper_closed else "open")
        entry = {
            "motion": np.asarray(r.motion, float).tolist(),
            "gripper": gripper,
            "takeover": r.takeover,
            "label": r.label,
            "start": r.start,
        }
        lines.append(json.dumps(entry))
    Path(path).write_text("\n".join(lines) + "\n")


class ReplayDevice(TeleopDevice):
    """Plays a trace file, one reading per poll."""

    kind = "replay"

    def __init__(self, config: ReplayConfig) -> None:
        if config.on_end not in ("release", "disconnect"):
            raise TeleopError(f"replay on_end must be 'release' or 'disconnect', got {config.on_end!r}")
        path = Path(config.path).expanduser()
        if not path.is_file():
            raise TeleopError(f"replay trace {path} does not exist")
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        self.readings = [parse_trace_line(line, i + 1) for i, line in enumerate(lines)]
        self.on_end = config.on_end
        self.waits_for_start = config.waits_for_start
        self.index = 0

    def poll(self) -> TeleopReading:
        if self.index >= len(self.readings):
            if self.on_end == "disconnect":
                raise TeleopLost("replay trace ended (device gone)")
            return TeleopReading()
        reading = self.readings[self.index]
        self.index += 1
        return reading
