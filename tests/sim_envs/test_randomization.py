import numpy as np
import pytest

import sim_envs
from sim_envs.randomization import REALITY_GAP, DomainRandomization


def test_reality_gap_applies_its_fixed_perturbation():
    nominal = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=())
    gap = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=(), randomization=REALITY_GAP)
    nominal.reset(seed=0)
    gap.reset(seed=0)
    cube_geom = gap.model.geom("cube").id
    cube_body = gap.model.body("cube").id
    assert gap.model.geom_friction[cube_geom, 0] == pytest.approx(
        0.7 * nominal.model.geom_friction[cube_geom, 0]
    )
    assert gap.model.body_mass[cube_body] == pytest.approx(1.5 * nominal.model.body_mass[cube_body])
    assert gap.model.actuator_gainprm[0, 0] == pytest.approx(0.8 * nominal.model.actuator_gainprm[0, 0])
    assert gap._latency_substeps == round(0.040 / gap.cfg.physics_dt)
    assert gap._latency_substeps > 0
    assert not np.allclose(gap.model.cam_pos, nominal.model.cam_pos)
    assert gap.model.light_diffuse[0, 0] == pytest.approx(0.7 * nominal.model.light_diffuse[0, 0])


def test_ranges_are_resampled_each_episode_and_seeded():
    cfg = {"friction_scale": (0.5, 1.5), "object_mass_scale": (0.5, 2.0), "randomize_table_texture": True}
    env = sim_envs.make("rlinf/FrankaPush-v0", cameras=(), randomization=cfg)
    cube = env.model.geom("cube").id
    frictions = []
    for seed in range(5):
        env.reset(seed=seed)
        frictions.append(float(env.model.geom_friction[cube, 0]))
    assert len(set(frictions)) == 5
    assert all(0.5 <= f <= 1.5 for f in frictions)
    env.reset(seed=2)
    assert env.model.geom_friction[cube, 0] == pytest.approx(frictions[2])


def test_control_latency_delays_the_response():
    def first_step_motion(latency_ms):
        env = sim_envs.make(
            "rlinf/FrankaReach-v0", cameras=(), randomization={"control_latency_ms": (latency_ms, latency_ms)}
        )
        env.reset(seed=0)
        start = env.scene.tcp_pos
        env.step(np.array([1, 0, 0, 0, 0, 0, 1], np.float32))
        return env.scene.tcp_pos[0] - start[0]

    assert first_step_motion(80.0) < 0.5 * first_step_motion(0.0)


def test_colour_jitter_changes_the_image():
    plain = sim_envs.make("rlinf/FrankaReach-v0", cameras=("front",))
    jittered = sim_envs.make("rlinf/FrankaReach-v0", cameras=("front",), randomization={"color_jitter": 0.3})
    a, _ = plain.reset(seed=0)
    b, _ = jittered.reset(seed=0)
    assert np.abs(a["images"]["front"].astype(int) - b["images"]["front"].astype(int)).mean() > 3


def _observed_and_true_cube(env):
    obs, _ = env.reset(seed=3)
    slices = env.privileged_spec().state_slices()
    state = obs["state"]
    return state[slices["cube_pos"]], state[slices["cube_rel_tcp"]], env.scene.cube_pos, env.scene.tcp_pos


def test_a_perception_bias_shifts_the_observed_cube_and_nothing_else():
    bias = np.array([0.01, -0.03, 0.0])
    env = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=(), privileged_state=True,
                        randomization={"object_position_bias_m": list(bias)})  # fmt: skip
    cube_obs, rel_obs, cube, tcp = _observed_and_true_cube(env)
    np.testing.assert_allclose(cube_obs, cube + bias, atol=1e-6)
    np.testing.assert_allclose(rel_obs, cube + bias - tcp, atol=1e-6)
    # The true scene (what success is judged on, and what a teleoperating person sees) is unshifted.
    unbiased = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=(), privileged_state=True)
    np.testing.assert_allclose(_observed_and_true_cube(unbiased)[2], cube)
    true_state = env.privileged_state(perceived=False)
    np.testing.assert_allclose(true_state[env.privileged_spec().state_slices()["cube_pos"]], cube, atol=1e-6)


def test_position_jitter_draws_a_new_offset_each_episode_around_the_bias():
    env = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=(), privileged_state=True,
                        randomization={"object_position_bias_m": [0.02, 0.0, 0.0],
                                       "object_position_jitter_m": 0.01})  # fmt: skip
    offsets = []
    for seed in range(8):
        env.reset(seed=seed)
        offsets.append(env.perceived.offset.copy())
    offsets = np.array(offsets)
    assert len({round(float(x), 6) for x in offsets[:, 0]}) == 8
    assert np.all(np.abs(offsets[:, 0] - 0.02) <= 0.01) and np.all(np.abs(offsets[:, 1]) <= 0.01)
    assert np.all(offsets[:, 2] == 0.0)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"friction_scale": (1.5, 0.5)}, r"friction_scale must be \(low, high\)"),
        ({"object_mass_scale": (-1.0, 1.0)}, "object_mass_scale must be >= 0"),
        ({"camera_pos_jitter_m": -0.1}, "camera_pos_jitter_m must be >= 0"),
        ({"object_position_bias_m": (0.01, 0.02)}, r"object_position_bias_m must be 3 numbers"),
        ({"object_position_bias_m": (0.0, float("nan"), 0.0)}, r"object_position_bias_m must be 3 numbers"),
        ({"object_position_jitter_m": -0.01}, "object_position_jitter_m must be >= 0"),
        ({"camera_mount_offset": {"side": {"pos_m": [0, 0, 0]}}}, "unknown camera 'side'"),
        (
            {"camera_mount_offset": {"front": {"pos": [0, 0, 0]}}},
            r"front takes the keys \['pos_m', 'rot_deg'\]",
        ),
        ({"camera_mount_offset": {"wrist": {"rot_deg": [1, 2]}}}, r"wrist.rot_deg must be 3 numbers"),
        ({"camera_mount_offset": [0.01, 0, 0]}, "must map a camera name"),
    ],
)
def test_bad_randomization_is_rejected(cfg, message):
    with pytest.raises(ValueError, match=message):
        DomainRandomization.from_any(cfg)


def test_latency_longer_than_a_control_period_is_rejected():
    with pytest.raises(ValueError, match="shorter than one control period"):
        sim_envs.make("rlinf/FrankaReach-v0", randomization={"control_latency_ms": (0, 150)})


def _camera_pose(env, name):
    import mujoco

    mujoco.mj_forward(env.model, env.data)
    cam = env.model.camera(name).id
    return env.data.cam_xpos[cam].copy(), env.data.cam_xmat[cam].reshape(3, 3).copy()


def _angle_deg(a, b):
    return float(np.degrees(np.arccos(np.clip((np.trace(a.T @ b) - 1) / 2, -1, 1))))


def test_a_camera_mount_offset_moves_each_camera_in_its_parent_frame_and_jitter_adds_on_top():
    offset = {"front": {"pos_m": [-0.03, 0.04, 0.0], "rot_deg": [0.0, 3.0, -4.0]},
              "wrist": {"pos_m": [0.01, 0.0, 0.0]}}  # fmt: skip
    nominal = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=())
    mounted = sim_envs.make(
        "rlinf/FrankaPickLift-v0", cameras=(), randomization={"camera_mount_offset": offset}
    )
    nominal.reset(seed=0)
    mounted.reset(seed=0)
    (p0, r0), (p1, r1) = _camera_pose(nominal, "front"), _camera_pose(mounted, "front")
    np.testing.assert_allclose(p1 - p0, [-0.03, 0.04, 0.0], atol=1e-9)  # the world frame
    assert _angle_deg(r0, r1) == pytest.approx(5.0, abs=1e-6)
    # The wrist camera's shift is along the hand's x axis, wherever the hand points.
    (w0, _), (w1, _) = _camera_pose(nominal, "wrist"), _camera_pose(mounted, "wrist")
    hand = nominal.data.xmat[nominal.model.body("hand").id].reshape(3, 3)
    np.testing.assert_allclose(w1 - w0, hand @ [0.01, 0.0, 0.0], atol=1e-9)
    # The offset is fixed: every episode has it; per-episode jitter varies around it.
    mounted.reset(seed=5)
    np.testing.assert_allclose(_camera_pose(mounted, "front")[0] - p0, [-0.03, 0.04, 0.0], atol=1e-9)
    jittered = sim_envs.make("rlinf/FrankaPickLift-v0", cameras=(),
                             randomization={"camera_mount_offset": offset, "camera_pos_jitter_m": 0.005})  # fmt: skip
    jittered.reset(seed=0)
    shift = _camera_pose(jittered, "front")[0] - p0
    assert np.all(np.abs(shift - [-0.03, 0.04, 0.0]) <= 0.005) and not np.allclose(shift, [-0.03, 0.04, 0.0])
