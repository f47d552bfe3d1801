"""Teleop devices and the mapping of their motion into the env's action space."""

from __future__ import annotations

import os
import sys
import types

import numpy as np
import pytest

from protos import EnvSpec
from protos.env_spec import ActionSpace, ee_delta_action_space
from robot_agent.teleop import TeleopError, TeleopLost, TeleopMapper, TeleopReading, make_teleop
from robot_agent.teleop.replay import write_trace


def spec(rotation: bool = True) -> EnvSpec:
    return EnvSpec(name="t", cameras=(), state_fields=(), action=ee_delta_action_space(rotation), control_hz=10.0,
                   instruction="", max_episode_steps=10)  # fmt: skip


def test_the_mapper_scales_motion_keeps_the_gripper_and_clips():
    mapper = TeleopMapper(spec(rotation=True), translation_gain=0.5)
    action = mapper.to_action(TeleopReading(motion=np.array([1, -2, 0.5, 0.1, 0, -0.3]), gripper_closed=True))
    np.testing.assert_allclose(action, [0.5, -0.5, 0.25, 0.1, 0, -0.3, -1.0], atol=1e-6)  # -1: closed
    assert mapper.to_action(TeleopReading())[-1] == -1.0  # no command: the gripper stays closed
    assert mapper.to_action(TeleopReading(gripper_closed=False))[-1] == 1.0
    no_rotation = TeleopMapper(spec(rotation=False)).to_action(TeleopReading(motion=np.ones(6)))
    np.testing.assert_allclose(no_rotation, [1, 1, 1, 1])


def test_the_mapper_refuses_an_action_it_cannot_drive():
    joints = ActionSpace(
        kind="joint_position", names=tuple(f"j{i}" for i in range(7)), low=(-1.0,) * 7, high=(1.0,) * 7
    )
    bad = EnvSpec(name="t", cameras=(), state_fields=(), action=joints, control_hz=10.0, instruction="",
                  max_episode_steps=10)  # fmt: skip
    with pytest.raises(TeleopError, match="ee-delta"):
        TeleopMapper(bad)


def test_replay_plays_the_trace_then_releases_or_disconnects(tmp_path):
    readings = [
        TeleopReading(motion=np.full(6, 0.1 * i, np.float32), takeover=i > 0, label=None) for i in range(3)
    ]
    write_trace(tmp_path / "trace.jsonl", readings)
    device = make_teleop("replay", {"path": str(tmp_path / "trace.jsonl")})
    played = [device.poll() for _ in range(4)]
    assert [r.takeover for r in played] == [False, True, True, False]  # released at the end
    np.testing.assert_allclose(played[2].motion, 0.2)
    gone = make_teleop("replay", {"path": str(tmp_path / "trace.jsonl"), "on_end": "disconnect"})
    for _ in range(3):
        gone.poll()
    with pytest.raises(TeleopLost):
        gone.poll()


@pytest.mark.parametrize(
    ("line", "message"),
    [("not json", "line 1: not JSON"), ('{"motion": [1, 2]}', "6 finite numbers"),
     ('{"gripper": "squeeze"}', "gripper must be"), ('{"label": "meh"}', "label must be")],
)  # fmt: skip
def test_a_bad_trace_line_is_named(tmp_path, line, message):
    (tmp_path / "t.jsonl").write_text(line + "\n")
    with pytest.raises(TeleopError, match=message):
        make_teleop("replay", {"path": str(tmp_path / "t.jsonl")})


def test_unknown_devices_and_keys_are_named(tmp_path):
    with pytest.raises(TeleopError, match="unknown teleop device 'glove'"):
        make_teleop("glove")
    with pytest.raises(ValueError, match="speed"):
        make_teleop("replay", {"path": "x", "speed": 2})
    with pytest.raises(TeleopError, match="does not exist"):
        make_teleop("replay", {"path": str(tmp_path / "missing.jsonl")})


class FakeSpaceMouse(types.ModuleType):
    """Stands in for pyspacemouse: ``open()``, ``read()`` -> state with x..yaw and buttons."""

    def __init__(self) -> None:
        super().__init__("fake_spacemouse")
        self.states: list = []
        self.present = True

    def open(self, device=None):
        return self.present

    def read(self):
        if not self.states:
            raise OSError("read error: device disconnected")
        return self.states.pop(0)


def state(x=0.0, yaw=0.0, buttons=(0, 0)):
    return types.SimpleNamespace(
        t=0.0, x=x, y=0.0, z=0.0, roll=0.0, pitch=0.0, yaw=yaw, buttons=list(buttons)
    )


@pytest.fixture
def spacemouse(monkeypatch):
    fake = FakeSpaceMouse()
    monkeypatch.setitem(sys.modules, "fake_spacemouse", fake)
    return fake


def test_spacemouse_takes_over_past_the_dead_zone_and_toggles_the_gripper(spacemouse):
    device = make_teleop("spacemouse", {"module": "fake_spacemouse", "deadzone": 0.1})
    spacemouse.states = [state(x=0.05), state(x=0.6, yaw=-0.3), state(buttons=(1, 0)), state(buttons=(1, 0)),
                         state(buttons=(0, 1))]  # fmt: skip
    idle, moving, press, held, success = (device.poll() for _ in range(5))
    assert not idle.takeover and not idle.motion.any()  # inside the dead zone: hands off
    assert (
        moving.takeover and moving.motion[0] == pytest.approx(0.6) and moving.motion[5] == pytest.approx(-0.3)
    )
    assert press.gripper_closed is True and held.gripper_closed is None  # a press toggles once
    assert not press.start and success.label == "success" and success.start  # button 1 also starts the next
    assert device.waits_for_start
    with pytest.raises(TeleopLost, match="disconnected"):
        device.poll()


def test_spacemouse_absent_or_library_missing_says_so(spacemouse):
    spacemouse.present = False
    with pytest.raises(TeleopError, match="no SpaceMouse found"):
        make_teleop("spacemouse", {"module": "fake_spacemouse"})
    with pytest.raises(TeleopError, match="needs no_such_hid_lib"):
        make_teleop("spacemouse", {"module": "no_such_hid_lib"})


def test_keyboard_keys_move_toggle_and_label():
    read_end, write_end = os.pipe()
    device = make_teleop("keyboard", {"fd": read_end, "step": 0.5})
    os.write(write_end, b"tww d")
    reading = device.poll()
    assert reading.takeover and reading.gripper_closed is True
    np.testing.assert_allclose(reading.motion, [1.0, -0.5, 0, 0, 0, 0])
    os.write(write_end, b"ty")
    reading = device.poll()
    assert not reading.takeover and reading.label == "success" and not reading.motion.any()
    assert not reading.start and device.waits_for_start
    os.write(write_end, b"\n")
    assert device.poll().start  # Enter: the scene is reset, start the next episode
    os.close(write_end)  # the terminal goes away: end of file
    with pytest.raises(TeleopLost, match="terminal closed"):
        device.poll()
    os.close(read_end)
