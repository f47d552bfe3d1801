"""``rlinf-calibrate sysid`` recovers the dynamics that made a dataset, and the sim reads its file."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calibration.sysid import EpisodeReplayer, SysIdConfig, fit, load_recorded_episodes
from protos.episode_frames import robot_type, vector_names
from protos.lerobot_dataset import EpisodeFrames, LeRobotWriter
from sim_envs.franka_env import FrankaEnv
from sim_envs.physics import PhysicsFileError, PhysicsParams
from sim_envs.scripted import play_expert

ROOT = Path(__file__).resolve().parents[2]
EXE = str(Path(sys.executable).with_name("rlinf-calibrate"))
# The twin's REALITY_GAP dynamics: the "real robot" whose physics sysid has to find.
TRUE_GAIN, TRUE_LATENCY_MS = 0.8, 40.0
GAP = {
    "friction_scale": [0.7, 0.7],
    "object_mass_scale": [1.5, 1.5],
    "actuator_gain_scale": [TRUE_GAIN, TRUE_GAIN],
    "control_latency_ms": [TRUE_LATENCY_MS, TRUE_LATENCY_MS],
}


def record_random_episodes(
    root: Path, task: str, episodes: int, steps: int, randomization=None, **env_kwargs
) -> Path:
    """Episodes of uniformly random actions (a rich excitation of the arm's dynamics), written as
    LeRobot v3 with what the robot would record: its state (here with the cube's pose) and actions."""
    env = FrankaEnv(task=task, cameras=(), privileged_state=True, randomization=randomization, **env_kwargs)
    writer = LeRobotWriter(root, fps=env.env_spec.control_hz, robot_type=robot_type(env.env_spec))
    for episode in range(episodes):
        rng = np.random.default_rng(episode)
        obs, _ = env.reset(seed=episode)
        states, actions = [], []
        for _ in range(steps):
            action = rng.uniform(-1, 1, env.env_spec.action.dim).astype(np.float32)
            states.append(obs["state"])
            actions.append(action)
            obs, *_ = env.step(action)
        vectors = {"observation.state": np.asarray(states), "action": np.asarray(actions)}
        writer.add_episode(
            EpisodeFrames(env.env_spec.instruction, {}, vectors, names=vector_names(env.env_spec))
        )
    return root


def record_expert_episodes(root: Path, episodes: int, randomization) -> tuple[Path, list[bool]]:
    """Teleoperated grasps: the scripted expert stands in for a person, who sees the cube where it
    is; the robot records its state as its perception reports it."""
    env = FrankaEnv(task="pick_lift", cameras=(), privileged_state=True, randomization=randomization)
    writer = LeRobotWriter(root, fps=env.env_spec.control_hz, robot_type="franka")
    successes = []
    for seed in range(episodes):
        episode = play_expert(env, seed)
        successes.append(episode.success)
        vectors = {"observation.state": episode.states, "action": episode.actions}
        writer.add_episode(
            EpisodeFrames(env.env_spec.instruction, {}, vectors, names=vector_names(env.env_spec))
        )
    return root, successes


@pytest.fixture(scope="module")
def robot_episodes(tmp_path_factory) -> Path:
    """The "robot": the sim under the gap dynamics."""
    return record_random_episodes(tmp_path_factory.mktemp("robot") / "episodes", "pick_lift", 4, 30, GAP)


def test_sysid_recovers_the_gain_and_latency_the_episodes_were_made_with(robot_episodes):
    recorded = load_recorded_episodes(robot_episodes, max_episodes=4)
    replayer = EpisodeReplayer("pick_lift", recorded)
    cfg = SysIdConfig(
        str(robot_episodes),
        params=("actuator_gain_scale", "control_latency_ms"),
        generations=10,
        population=6,
    )
    result = fit(recorded.episodes, replayer, cfg)
    # Tolerance: 5 % of the gain; latency to the physics step (5 ms) it is realised in.
    assert abs(result.params.actuator_gain_scale - TRUE_GAIN) < 0.05
    assert result.params.control_latency_ms == TRUE_LATENCY_MS
    assert result.error_after < 0.05 * result.error_before
    assert result.field_rms_after["tcp_pos"] < result.field_rms_before["tcp_pos"] / 5


def test_sysid_fits_a_ur5e_twin_from_its_datasets_robot_type(tmp_path):
    """A UR5e's dataset (robot_type "ur5e", six joints) is replayed on the sim's UR5e, not the Panda."""
    root = record_random_episodes(tmp_path / "ur5e", "pick_lift", 3, 30, GAP, robot="ur5e")
    recorded = load_recorded_episodes(root, max_episodes=3)
    assert recorded.robot == "ur5e"
    replayer = EpisodeReplayer("pick_lift", recorded)
    assert replayer.env.embodiment.name == "ur5e"
    cfg = SysIdConfig(str(root), params=("actuator_gain_scale", "control_latency_ms"), generations=10,
                      population=6)  # fmt: skip
    result = fit(recorded.episodes, replayer, cfg)
    assert abs(result.params.actuator_gain_scale - TRUE_GAIN) < 0.05
    assert result.params.control_latency_ms == TRUE_LATENCY_MS
    assert result.error_after < 0.05 * result.error_before


@pytest.mark.slow
def test_sysid_finds_the_perception_offset_from_teleoperated_grasps(tmp_path):
    bias_y = 0.03  # a camera calibration 3 cm off across the table
    root, successes = record_expert_episodes(
        tmp_path / "episodes", 4, {"object_position_bias_m": [0.0, bias_y, 0.0]}
    )
    assert all(successes)  # the person grasps the cube itself, not where perception puts it
    recorded = load_recorded_episodes(root, max_episodes=4)
    replayer = EpisodeReplayer("pick_lift", recorded)
    true = PhysicsParams(object_position_bias_y_m=bias_y)
    assert max(replayer.squared_errors(recorded.episodes, true).values()) < 1e-8
    cfg = SysIdConfig(str(root), params=("object_position_bias_x_m", "object_position_bias_y_m"),
                      generations=10, population=6)  # fmt: skip
    result = fit(recorded.episodes, replayer, cfg)
    # Tolerance: 1 cm, a third of the offset (the grasp fails, and the error jumps, from about 3 cm).
    assert abs(result.params.object_position_bias_y_m - bias_y) < 0.01
    assert abs(result.params.object_position_bias_x_m) < 0.01
    assert result.error_after < 0.05 * result.error_before


def test_the_replay_under_the_true_physics_reproduces_the_recording(robot_episodes):
    recorded = load_recorded_episodes(robot_episodes, max_episodes=2)
    replayer = EpisodeReplayer("pick_lift", recorded)
    true = PhysicsParams(0.7, 1.5, TRUE_GAIN, TRUE_LATENCY_MS)
    errors = replayer.squared_errors(recorded.episodes, true)
    assert set(errors) == {"tcp_pos", "joint_pos", "gripper_width", "cube_pos"}
    assert (
        max(errors.values())
        < 1e-8
        < max(replayer.squared_errors(recorded.episodes, PhysicsParams()).values())
    )


def test_episodes_of_a_robot_with_a_smaller_action_scale_replay_only_under_that_scale(tmp_path):
    scale = {"max_translation_m": 0.03, "max_rotation_rad": 0.2}  # the agent's step caps
    root = record_random_episodes(tmp_path / "episodes", "pick_lift", 1, 20, GAP, **scale)
    recorded = load_recorded_episodes(root, max_episodes=1)
    true = PhysicsParams(0.7, 1.5, TRUE_GAIN, TRUE_LATENCY_MS)
    told = EpisodeReplayer("pick_lift", recorded, scale).squared_errors(recorded.episodes, true)
    untold = EpisodeReplayer("pick_lift", recorded).squared_errors(recorded.episodes, true)
    assert max(told.values()) < 1e-8 < untold["tcp_pos"]
    bad = subprocess.run([EXE, "sysid", "--dataset", str(root), "--action-scale", "0.03"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode != 0 and "--action-scale must be M,RAD" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr


def test_the_cli_writes_a_physics_file_that_the_sim_applies(robot_episodes, tmp_path):
    out = tmp_path / "physics.json"
    done = subprocess.run(
        [EXE, "sysid", "--dataset", str(robot_episodes), "--params", "actuator_gain_scale",
         "--episodes", "2", "--generations", "3", "--population", "4", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "replay error" in done.stdout and out.is_file()
    assert (tmp_path / "physics_overlay.png").stat().st_size > 10_000
    document = json.loads(out.read_text())
    gain = document["params"]["actuator_gain_scale"]
    assert gain < 0.95 and document["fit"]["error_after"] < document["fit"]["error_before"]

    nominal, identified = (
        FrankaEnv(task="pick_lift", cameras=()),
        FrankaEnv(task="pick_lift", cameras=(), physics_file=str(out)),
    )
    for env in (nominal, identified):
        env.reset(seed=0)
    np.testing.assert_allclose(
        identified.model.actuator_gainprm[:, 0], nominal.model.actuator_gainprm[:, 0] * gain
    )


def test_randomisation_varies_around_the_identified_physics(tmp_path):
    out = tmp_path / "physics.json"
    out.write_text(json.dumps({"format": "rlinf-physics-v1", "params": {"control_latency_ms": 30.0}}))
    env = FrankaEnv(
        task="reach", cameras=(), physics_file=str(out), randomization={"control_latency_ms": [0.0, 20.0]}
    )
    drawn = [env.randomizer.apply(np.random.default_rng(seed)).control_latency_ms for seed in range(20)]
    assert min(drawn) >= 30.0 and max(drawn) <= 50.0 and max(drawn) - min(drawn) > 5.0


def test_an_identified_perception_offset_shifts_what_the_sim_observes(tmp_path):
    out = tmp_path / "physics.json"
    params = {"object_position_bias_x_m": -0.02, "object_position_bias_y_m": 0.01}
    out.write_text(json.dumps({"format": "rlinf-physics-v1", "params": params}))
    env = FrankaEnv(task="pick_lift", cameras=(), privileged_state=True, physics_file=str(out),
                    randomization={"object_position_bias_m": [0.0, 0.005, 0.0]})  # fmt: skip
    obs, _ = env.reset(seed=0)
    observed = obs["state"][env.privileged_spec().state_slices()["cube_pos"]]
    np.testing.assert_allclose(observed - env.scene.cube_pos, [-0.02, 0.015, 0.0], atol=1e-6)


@pytest.mark.parametrize(
    "document, message",
    [
        ({"format": "rlinf-physics-v1", "params": {"gravity": 2.0}}, "unknown key 'gravity' in physics file"),
        ({"format": "rlinf-physics-v1", "params": {"friction_scale": -1}}, "friction_scale must be"),
        (
            {"format": "rlinf-physics-v1", "params": {"object_position_bias_y_m": "3 cm"}},
            "object_position_bias_y_m must be a finite number",
        ),
        ({"params": {}}, "is not a rlinf-physics-v1 file"),
        (
            {"format": "rlinf-physics-v1", "params": {"control_latency_ms": 150.0}},
            "shorter than one control period",
        ),
    ],
)
def test_a_bad_physics_file_is_one_line(tmp_path, document, message):
    path = tmp_path / "physics.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match=message) as error:
        FrankaEnv(task="reach", cameras=(), physics_file=str(path))
    assert "\n" not in str(error.value)
    with pytest.raises(PhysicsFileError, match="does not exist"):
        FrankaEnv(task="reach", cameras=(), physics_file=str(tmp_path / "missing.json"))


def test_sysid_refuses_another_robots_dataset_and_an_empty_one(tmp_path):
    other = record_random_episodes(tmp_path / "other", "reach", 1, 5)
    info_path = other / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    names = info["features"]["observation.state"]["names"]
    info["features"]["observation.state"]["names"] = ["shoulder_pan", *names[1:]]  # not the Franka's layout
    info_path.write_text(json.dumps(info))
    unknown = record_random_episodes(tmp_path / "unknown", "reach", 1, 5)
    info_path = unknown / "meta" / "info.json"
    info_path.write_text(json.dumps({**json.loads(info_path.read_text()), "robot_type": "kuka_iiwa"}))
    for dataset, message in (
        (other, "is a panda's, but its state does not start with the panda's proprioception"),
        (unknown, "has robot_type 'kuka_iiwa'; sysid replays the sim's arms, ['franka', 'ur5e']"),
        (tmp_path / "nothing", "not a LeRobot v3 dataset"),
    ):
        done = subprocess.run(
            [EXE, "sysid", "--dataset", str(dataset)], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_parameters_the_episodes_cannot_tell_apart_stay_nominal(tmp_path):
    # Random motion that never touches the cube says nothing about its friction or mass.
    root = record_random_episodes(tmp_path / "no_contact", "pick_lift", 3, 20, GAP)
    recorded = load_recorded_episodes(root, max_episodes=3)
    replayer = EpisodeReplayer("pick_lift", recorded)
    cfg = SysIdConfig(str(root), params=("friction_scale", "object_mass_scale", "actuator_gain_scale"),
                      generations=6, population=6)  # fmt: skip
    result = fit(recorded.episodes, replayer, cfg)
    rows = result.per_parameter
    assert not rows["friction_scale"]["identified"] and result.params.friction_scale == 1.0
    assert not rows["object_mass_scale"]["identified"] and result.params.object_mass_scale == 1.0
    assert rows["actuator_gain_scale"]["identified"] and result.params.actuator_gain_scale < 0.95
