"""Builds the MJCF of the tabletop scene: an arm (``SceneConfig.robot``), table, cubes, goal marker, cameras."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sim_envs.errors import EnvConfigError
from sim_envs.sim_arm import actuators_xml, coupling_xml, look_at_xyaxes, sim_arm, tcp_target_xml

TABLE_TOP_Z = 0.0  # the robot base stands on the table top, at the world origin
TABLE_MATERIALS = ("table_wood", "table_checker", "table_grid")
FRONT_CAMERA_POS = (1.1, 0.0, 0.6)
FRONT_CAMERA_TARGET = (0.35, 0.0, 0.12)


@dataclass(frozen=True)
class CameraMount:
    """A calibrated camera: pose in its parent frame (the world for ``front``, the hand for ``wrist``)
    as a position and MuJoCo ``xyaxes``, and the vertical field of view in degrees."""

    name: str
    pos: tuple[float, float, float]
    xyaxes: tuple[float, float, float, float, float, float]
    fovy: float

    def xml(self) -> str:
        pos = " ".join(f"{v:.6f}" for v in self.pos)
        xyaxes = " ".join(f"{v:.6f}" for v in self.xyaxes)
        return f'<camera name="{self.name}" pos="{pos}" xyaxes="{xyaxes}" fovy="{self.fovy:.4f}"/>'


CAMERA_FILE_VERSION = 1


def load_camera_mounts(path: str) -> tuple[CameraMount, ...]:
    """Read a camera file written by ``rlinf-calibrate apply-to-sim``."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise EnvConfigError(f"cannot read camera file {path}: {exc}") from None
    if data.get("version") != CAMERA_FILE_VERSION:
        raise EnvConfigError(
            f"camera file {path} has version {data.get('version')}, expected {CAMERA_FILE_VERSION}"
        )
    mounts = []
    for name, cam in data["cameras"].items():
        if name not in ("front", "wrist"):
            raise EnvConfigError(
                f"camera file {path}: unknown camera {name!r}; the scene has 'front' and 'wrist'"
            )
        mounts.append(CameraMount(name, tuple(cam["pos"]), tuple(cam["xyaxes"]), float(cam["fovy"])))
    return tuple(mounts)


@dataclass(frozen=True)
class SceneConfig:
    """What goes into the scene."""

    robot: str = "panda"  # the arm (sim_envs.sim_arm.SIM_ARM_MODULES), its base at the world origin
    with_cube: bool = True
    extra_cubes: tuple[str, ...] = ()  # more cubes by colour (CUBE_COLORS), e.g. ("green", "blue")
    cube_half_size: float = 0.02
    cube_mass: float = 0.05
    cube_friction: float = 1.0
    # 5 ms steps with the full implicit integrator. Under "implicitfast" (which drops the velocity
    # derivatives of the Coriolis and centrifugal forces) a light cube pinched between a finger pad
    # and the table spun up in sign-flipping steps (19 -> -137 -> 2809 rad/s in three substeps) and
    # tunnelled through the table: 22 of 200 scripted pick-lifts under REALITY_GAP, 0 with "implicit"
    # (about 18 % slower physics; halving the step also cures it but costs about 36 %).
    physics_dt: float = 0.005
    arm_control: str = "cartesian"  # or "joint_position"
    front_fovy: float = 55.0
    camera_mounts: tuple[CameraMount, ...] = ()  # calibrated cameras replacing the defaults
    offscreen_width: int = 256  # the largest image any camera (or the display view) renders
    offscreen_height: int = 256


CUBE_COLORS = {
    "red": "0.85 0.15 0.12",
    "green": "0.15 0.7 0.2",
    "blue": "0.15 0.3 0.85",
    "yellow": "0.9 0.8 0.1",
}


def cube_name(color: str) -> str:
    """The red cube is the tasks' ``cube``; others are ``cube_<color>`` (body, joint and geom)."""
    return "cube" if color == "red" else f"cube_{color}"


def cube_xml(cfg: SceneConfig, color: str, index: int) -> str:
    s, name = cfg.cube_half_size, cube_name(color)
    return f"""
<body name="{name}" pos="0.5 {0.1 * index} {TABLE_TOP_Z + s}">
  <freejoint name="{name}_joint"/>
  <geom name="{name}" type="box" size="{s} {s} {s}" mass="{cfg.cube_mass}" material="cube_{color}"
        friction="{cfg.cube_friction} 0.02 0.001" condim="4" contype="1" conaffinity="3"
        solref="0.01 1" solimp="0.95 0.99 0.001"/>
</body>"""


def build_scene_xml(cfg: SceneConfig) -> str:
    """Return a complete MJCF document for the scene."""
    for color in cfg.extra_cubes:
        if color not in CUBE_COLORS or color == "red":
            raise EnvConfigError(
                f"extra cube colour {color!r} is not one of {sorted(set(CUBE_COLORS) - {'red'})}"
            )
    colors = (("red",) if cfg.with_cube else ()) + tuple(cfg.extra_cubes)
    cube = "".join(cube_xml(cfg, color, i) for i, color in enumerate(colors))
    cube_materials = "\n    ".join(
        f'<material name="cube_{color}" rgba="{rgb} 1"/>' for color, rgb in CUBE_COLORS.items()
    )
    arm = sim_arm(cfg.robot)
    mounts = {m.name: m.xml() for m in cfg.camera_mounts}
    front_xyaxes = look_at_xyaxes(FRONT_CAMERA_POS, FRONT_CAMERA_TARGET)
    pos = " ".join(str(v) for v in FRONT_CAMERA_POS)
    front_camera = mounts.get(
        "front", f'<camera name="front" pos="{pos}" xyaxes="{front_xyaxes}" fovy="{cfg.front_fovy}"/>'
    )
    return f"""
<mujoco model="rlinf_{cfg.robot}_tabletop">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{cfg.physics_dt}" integrator="implicit" cone="elliptic" impratio="10"/>
  <visual>
    <quality shadowsize="0" offsamples="0"/>
    <global offwidth="{cfg.offscreen_width}" offheight="{cfg.offscreen_height}"/>
    <headlight ambient="0.35 0.35 0.35" diffuse="0.4 0.4 0.4" specular="0.1 0.1 0.1"/>
  </visual>
  <asset>
    <texture name="floor_tex" type="2d" builtin="checker" rgb1="0.25 0.27 0.3" rgb2="0.2 0.22 0.25" width="256" height="256"/>
    <material name="floor" texture="floor_tex" texrepeat="8 8"/>
    <texture name="wood_tex" type="2d" builtin="flat" rgb1="0.62 0.5 0.36" width="64" height="64"/>
    <texture name="checker_tex" type="2d" builtin="checker" rgb1="0.55 0.55 0.55" rgb2="0.45 0.45 0.45" width="256" height="256"/>
    <texture name="grid_tex" type="2d" builtin="gradient" rgb1="0.7 0.7 0.65" rgb2="0.4 0.4 0.38" width="256" height="256"/>
    <material name="table_wood" texture="wood_tex" texrepeat="1 1"/>
    <material name="table_checker" texture="checker_tex" texrepeat="6 6"/>
    <material name="table_grid" texture="grid_tex" texrepeat="1 1"/>
    {arm.materials_xml}
    {cube_materials}
    <material name="goal_green" rgba="0.1 0.85 0.2 0.45"/>
  </asset>
  <default>
    {arm.defaults_xml}
  </default>
  <worldbody>
    <light name="key_light" pos="0.6 -0.6 1.6" dir="-0.2 0.4 -1" directional="true" castshadow="false" diffuse="0.6 0.6 0.6"/>
    <geom name="floor" type="plane" size="3 3 0.1" pos="0 0 -0.75" material="floor" contype="1" conaffinity="3"/>
    <geom name="table" type="box" size="0.55 0.7 0.02" pos="0.45 0 {TABLE_TOP_Z - 0.02}" material="table_wood"
          contype="1" conaffinity="3" friction="0.8 0.02 0.001"/>
    {front_camera}
    {arm.body_xml(mounts.get("wrist"))}
    {tcp_target_xml() if cfg.arm_control == "cartesian" else ""}
    {cube}
    <body name="goal" mocap="true" pos="0.5 0.2 0.2">
      <geom name="goal_marker" type="sphere" size="0.02" material="goal_green" contype="0" conaffinity="0" group="2"/>
    </body>
  </worldbody>
  {coupling_xml(arm)}
  <actuator>
    {actuators_xml(arm, cfg.arm_control)}
  </actuator>
</mujoco>
"""
