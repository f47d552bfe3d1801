"""Domain randomisation knobs, sampled at every reset. A fixed perturbed set emulates 'the real robot'."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from protos.typed_config import check_known_keys
from sim_envs.errors import EnvConfigError

Range = tuple[float, float]


@dataclass(frozen=True)
class DomainRandomization:
    """Uniform ranges sampled per episode. Equal endpoints give a fixed perturbation."""

    friction_scale: Range = (1.0, 1.0)  # (low, high) factor on the cube's and table's friction
    object_mass_scale: Range = (1.0, 1.0)  # (low, high) factor on the objects' masses
    actuator_gain_scale: Range = (1.0, 1.0)  # (low, high) factor on the arm's controller gains
    control_latency_ms: Range = (0.0, 0.0)  # (low, high) delay before an action takes effect
    camera_pos_jitter_m: float = 0.0  # uniform +- shift of each camera per episode
    camera_rot_jitter_deg: float = 0.0  # uniform +- rotation of each camera per episode
    light_intensity_scale: Range = (1.0, 1.0)  # (low, high) factor on the lights
    randomize_table_texture: bool = False  # a random table texture per episode
    color_jitter: float = 0.0  # uniform +- change of the objects' colours
    # Perception error: a fixed offset (x, y, z) of every observed object position from the true one,
    # as a camera-to-robot calibration error gives; then a uniform +-jitter on x and y per episode.
    object_position_bias_m: tuple[float, float, float] = (0.0, 0.0, 0.0)
    object_position_jitter_m: float = 0.0  # see object_position_bias_m
    # A camera mounted off its nominal pose (the CAD model's), fixed: per camera ("front", "wrist"), a
    # shift "pos_m" and a rotation vector "rot_deg", both in the camera's parent frame (the world for
    # front, the hand for wrist). `rlinf-calibrate hand-eye` measures it; the jitter above adds to it.
    camera_mount_offset: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        bias = self.object_position_bias_m
        if not _is_vector3(bias):
            raise EnvConfigError(
                f"randomization.object_position_bias_m must be 3 numbers (x, y, z), got {bias}"
            )
        object.__setattr__(self, "camera_mount_offset", _checked_mount_offsets(self.camera_mount_offset))
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("object_position_bias_m", "camera_mount_offset"):
                continue
            if isinstance(value, tuple):
                if len(value) != 2 or value[0] > value[1]:
                    raise EnvConfigError(f"randomization.{f.name} must be (low, high), got {value}")
                if value[0] < 0:
                    raise EnvConfigError(f"randomization.{f.name} must be >= 0, got {value}")
            elif isinstance(value, float) and value < 0:
                raise EnvConfigError(f"randomization.{f.name} must be >= 0, got {value}")

    @classmethod
    def from_any(cls, value: DomainRandomization | dict | None) -> DomainRandomization:
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise TypeError(f"randomization must be a dict or DomainRandomization, got {value!r}")
        check_known_keys(cls, value, "randomization", EnvConfigError)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in value.items()})


def _is_vector3(value) -> bool:
    return (
        isinstance(value, (tuple, list))
        and len(value) == 3
        and all(isinstance(v, (int, float)) and np.isfinite(v) for v in value)
    )


MOUNTED_CAMERAS = ("front", "wrist")
MOUNT_OFFSET_KEYS = ("pos_m", "rot_deg")


def _checked_mount_offsets(offsets) -> dict:
    """``camera_mount_offset`` validated, with every camera's two keys as 3-tuples (missing: zero)."""
    where = "randomization.camera_mount_offset"
    if not isinstance(offsets, dict):
        raise EnvConfigError(f"{where} must map a camera name to {{pos_m, rot_deg}}, got {offsets!r}")
    checked = {}
    for camera, offset in offsets.items():
        if camera not in MOUNTED_CAMERAS:
            raise EnvConfigError(f"{where}: unknown camera {camera!r}; the scene has {list(MOUNTED_CAMERAS)}")
        if not isinstance(offset, dict) or set(offset) - set(MOUNT_OFFSET_KEYS):
            raise EnvConfigError(f"{where}.{camera} takes the keys {list(MOUNT_OFFSET_KEYS)}, got {offset!r}")
        for key in MOUNT_OFFSET_KEYS:
            if not _is_vector3(offset.get(key, (0.0, 0.0, 0.0))):
                raise EnvConfigError(
                    f"{where}.{camera}.{key} must be 3 numbers (x, y, z), got {offset[key]!r}"
                )
        checked[camera] = {
            key: tuple(float(v) for v in offset.get(key, (0, 0, 0))) for key in MOUNT_OFFSET_KEYS
        }
    return checked


def offset_camera_mounts(model, offsets: dict) -> None:
    """Move the named cameras of a compiled model by ``offsets`` (a validated ``camera_mount_offset``),
    from where they are now, each in its parent frame."""
    import mujoco

    for camera, offset in offsets.items():
        index = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if index < 0:
            continue  # a scene without this camera
        model.cam_pos[index] += offset["pos_m"]
        model.cam_quat[index] = _quat_mul(_rotation_vector_quat(offset["rot_deg"]), model.cam_quat[index])


def _rotation_vector_quat(rotation_deg) -> np.ndarray:
    vector = np.deg2rad(np.asarray(rotation_deg, np.float64))
    angle = float(np.linalg.norm(vector))
    if angle == 0.0:
        return np.array([1.0, 0.0, 0.0, 0.0])
    return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * vector / angle])


# A fixed "reality gap": what the sim twin uses to stand in for the real robot.
REALITY_GAP = DomainRandomization(
    friction_scale=(0.7, 0.7),
    object_mass_scale=(1.5, 1.5),
    actuator_gain_scale=(0.8, 0.8),
    control_latency_ms=(40.0, 40.0),
    camera_pos_jitter_m=0.01,
    camera_rot_jitter_deg=2.0,
    light_intensity_scale=(0.7, 0.7),
    color_jitter=0.08,
)


@dataclass(frozen=True)
class EpisodeRandomization:
    """The values drawn for one episode."""

    friction_scale: float
    object_mass_scale: float
    actuator_gain_scale: float
    control_latency_ms: float
    light_intensity_scale: float
    object_position_offset_m: np.ndarray  # added to every observed object position


def _uniform(rng: np.random.Generator, bounds: Range) -> float:
    low, high = bounds
    return float(low) if low == high else float(rng.uniform(low, high))


class ModelRandomizer:
    """Applies a :class:`DomainRandomization` to a compiled MuJoCo model, from its nominal values."""

    def __init__(self, model, cfg: DomainRandomization) -> None:
        import mujoco

        self.model = model
        self.cfg = cfg
        self._nominal = {
            "geom_friction": model.geom_friction.copy(),
            "body_mass": model.body_mass.copy(),
            "body_inertia": model.body_inertia.copy(),
            "actuator_gainprm": model.actuator_gainprm.copy(),
            "actuator_biasprm": model.actuator_biasprm.copy(),
            "cam_pos": model.cam_pos.copy(),
            "cam_quat": model.cam_quat.copy(),
            "light_diffuse": model.light_diffuse.copy(),
            "geom_rgba": model.geom_rgba.copy(),
            "mat_rgba": model.mat_rgba.copy(),
            "geom_matid": model.geom_matid.copy(),
        }
        cube = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "cube")
        self._cube_body = cube if cube >= 0 else None
        self._table_geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "table")
        self._table_materials = [
            mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MATERIAL, name)
            for name in ("table_wood", "table_checker", "table_grid")
        ]

    def apply(self, rng: np.random.Generator) -> EpisodeRandomization:
        m, cfg, nominal = self.model, self.cfg, self._nominal
        drawn = EpisodeRandomization(
            friction_scale=_uniform(rng, cfg.friction_scale),
            object_mass_scale=_uniform(rng, cfg.object_mass_scale),
            actuator_gain_scale=_uniform(rng, cfg.actuator_gain_scale),
            control_latency_ms=_uniform(rng, cfg.control_latency_ms),
            light_intensity_scale=_uniform(rng, cfg.light_intensity_scale),
            object_position_offset_m=self._object_offset(rng),
        )
        m.geom_friction[:, 0] = nominal["geom_friction"][:, 0] * drawn.friction_scale
        m.body_mass[:] = nominal["body_mass"]
        m.body_inertia[:] = nominal["body_inertia"]
        if self._cube_body is not None:
            m.body_mass[self._cube_body] *= drawn.object_mass_scale
            m.body_inertia[self._cube_body] *= drawn.object_mass_scale
        # Position servos: gain kp on ctrl, bias -kp on position and -kv on velocity.
        m.actuator_gainprm[:, 0] = nominal["actuator_gainprm"][:, 0] * drawn.actuator_gain_scale
        m.actuator_biasprm[:, 1:3] = nominal["actuator_biasprm"][:, 1:3] * drawn.actuator_gain_scale
        self._jitter_cameras(rng)
        m.light_diffuse[:] = np.clip(nominal["light_diffuse"] * drawn.light_intensity_scale, 0, 1)
        self._jitter_appearance(rng)
        return drawn

    def _object_offset(self, rng: np.random.Generator) -> np.ndarray:
        offset = np.array(self.cfg.object_position_bias_m, np.float64)
        if self.cfg.object_position_jitter_m > 0:
            offset[:2] += rng.uniform(-1, 1, 2) * self.cfg.object_position_jitter_m
        return offset

    def _jitter_cameras(self, rng: np.random.Generator) -> None:
        m, nominal = self.model, self._nominal
        m.cam_pos[:] = nominal["cam_pos"]
        m.cam_quat[:] = nominal["cam_quat"]
        offset_camera_mounts(m, self.cfg.camera_mount_offset)  # the mount error, then the jitter on it
        if self.cfg.camera_pos_jitter_m > 0:
            m.cam_pos[:] += rng.uniform(-1, 1, m.cam_pos.shape) * self.cfg.camera_pos_jitter_m
        if self.cfg.camera_rot_jitter_deg > 0:
            for i in range(m.ncam):
                axis = rng.normal(size=3)
                axis /= np.linalg.norm(axis)
                angle_deg = self.cfg.camera_rot_jitter_deg * rng.uniform(-1, 1)
                m.cam_quat[i] = _quat_mul(_rotation_vector_quat(angle_deg * axis), m.cam_quat[i])

    def _jitter_appearance(self, rng: np.random.Generator) -> None:
        m, nominal = self.model, self._nominal
        m.geom_rgba[:] = nominal["geom_rgba"]
        m.mat_rgba[:] = nominal["mat_rgba"]
        m.geom_matid[:] = nominal["geom_matid"]
        if self.cfg.color_jitter > 0:
            noise = rng.uniform(-1, 1, (m.nmat, 3)) * self.cfg.color_jitter
            m.mat_rgba[:, :3] = np.clip(nominal["mat_rgba"][:, :3] + noise, 0, 1)
        if self.cfg.randomize_table_texture and self._table_geom >= 0:
            m.geom_matid[self._table_geom] = rng.choice(self._table_materials)


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    )
