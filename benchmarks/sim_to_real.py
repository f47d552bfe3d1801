"""Sim-to-real on FrankaPickLift: which lever closes the gap to "the real robot"?

The real robot is the sim twin under a reality-gap profile (``--gap PROFILE.json``; default: the
``REALITY_GAP`` dynamics: friction x0.7, cube mass x1.5, actuator gain x0.8, 40 ms latency, which a
state policy crosses at 0.67-1.00; ``benchmarks/gaps/hard_dynamics.json``: friction x0.4, cube mass
x2.5, actuator gain x0.55, 40 ms, where sim-only PPO dropped to 0.38 before the exploration noise was
matched to the action scale; ``benchmarks/gaps/extreme_dynamics.json``: x0.2, x5, x0.3 and 90 ms;
``benchmarks/gaps/perception_offset.json``: the hard dynamics, and the cube's pose as perception reports
it 3 cm off across the table, as a camera calibration error gives; its two halves, for diagnoses with
``--reevaluate --eval-gap``: ``dynamics_only.json`` (the dynamics and the offset) and ``cameras_only.json``
(camera pose jitter, dimmer light, colour jitter); ``none.json``: the twin as the nominal sim;
``reality_gap.json``: the default gap as a file), run by
``rlinf-robot connect --robot sim-twin`` agent processes over the real gRPC link, at its real 10 Hz.
Every arm trains a state policy (7-D end-effector actions, the cube's pose in the state) for the same
wall-clock budget, then its final policy is evaluated greedily on twins over the link:

- ``sim_nominal``: PPO on the nominal sim only;
- ``sim_dr``: PPO on the sim with domain randomisation of the dynamics (``DR``: generic ranges around
  nominal, which cover the default gap but not all of the hard or extreme one, and no perception offset);
- ``sim_sysid``: PPO on the sim with the physics ``rlinf-calibrate sysid`` fitted from ``--sysid-episodes``
  twin episodes (collected over the link: random actions on one twin, teleoperated grasps by the
  scripted expert on the other (``--sysid-expert-twins``); they count as robot episodes);
- ``sim_calibrated`` (``--policy image`` only): ``sim_nominal``'s state policy teaches its camera student
  in the sim with the twin's cameras as ``rlinf-calibrate`` measures them (intrinsics, hand-eye
  eye-to-hand for ``front`` and eye-in-hand for ``wrist``, on the twin's camera mounts, then
  ``apply-to-sim`` into the sim's ``camera_file``): the lever for a camera mounted off its nominal
  pose (``benchmarks/gaps/camera_mount.json``: the default dynamics and a front camera 5 cm and 5 deg
  off, a wrist camera 1.4 cm and 3 deg off);
- ``cotrain_scratch`` / ``cotrain_finetune``: ``serve server.mode=train``, PPO on 16 sim envs + 2 twins
  (robot weight ``--robot-weight``, 2), from scratch / from ``sim_nominal``'s final policy;
- ``twin_only``: RLPD on 2 twins alone, from 20 episodes teleoperated on the twins by the scripted
  expert (``algo.demo_dataset``; real-world RL as HIL-SERL; the pool's one sim env has weight 0).

Reported per arm and seed: twin success over ``--eval-episodes``, robot episodes used, robot episodes
until the robots' training success reached 80 % (rolling over 10), and the sysid fit.

``--policy image``: each sim-only arm's state policy then teaches a CNN policy that sees the 64 px
front and wrist cameras and proprioception only (teacher-student distillation in the arm's own sim:
DART episodes played by the state policy, then BC; ``sim_dr``'s student also sees randomised cameras,
light and colours), and the twins evaluate that student through their own cameras. The state
policies can come from an earlier run (``--teachers-from WORK``). The arms that learn on the twins
learn from their cameras (``online_arm``): ``cotrain_finetune`` fine-tunes ``sim_nominal``'s student
with PPO on 16 camera sim envs + 2 twins that stream their cameras (``IMAGE_PPO`` + ``IMAGE_FINETUNE``;
about 94 env steps/s on 2 cores with the twins), ``cotrain_scratch`` trains a CNN policy from scratch
so, and ``twin_only`` runs RLPD on 64 px cameras (``rlpd_pick_lift_image``; about 7 env steps/s on
2 cores, against the 2 twins' 20 ticks/s).

    python benchmarks/sim_to_real.py [--minutes 8] [--seeds 3] [--first-seed 0] [--eval-episodes 50]
        [--gap benchmarks/gaps/hard_dynamics.json] [--arms ...] [--update] [--previous-action]
        [--physics-curriculum N] [--policy image [--teachers-from WORK] [--distill-minutes 4]]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results")
ARMS = (
    "sim_nominal",
    "sim_dr",
    "sim_sysid",
    "sim_calibrated",
    "cotrain_scratch",
    "cotrain_finetune",
    "twin_only",
)
ONLINE_ARMS = ("cotrain_scratch", "cotrain_finetune", "twin_only")  # they learn on the twins
SIM_KWARGS = "cameras: [], action_rotation: true, privileged_state: true"
# Domain randomisation for sim_dr: generic ranges around nominal that a user would pick.
DR_DYNAMICS = "friction_scale: [0.5, 1.2], object_mass_scale: [0.5, 2.0], actuator_gain_scale: [0.7, 1.2], control_latency_ms: [0.0, 60.0]"
DR = f"{{{DR_DYNAMICS}}}"
# --policy image: the student's cameras, and sim_dr's students also see randomised cameras and light.
IMAGE_CAMERAS = ("front", "wrist")
IMAGE_SIZE = 64
STUDENT_KWARGS = (f"cameras: [{', '.join(IMAGE_CAMERAS)}], image_height: {IMAGE_SIZE}, image_width: {IMAGE_SIZE}, "
                  "action_rotation: true, privileged_state: false")  # fmt: skip
STUDENT_UPDATES_PER_ITERATION = 200  # BC steps between the student's greedy episodes in its sim
# PPO on a cloned camera student (``cotrain_finetune`` with --policy image): the CNN student gains a
# fresh value head on its encoder, fitted alone for the first 5 updates and at its own unclipped
# rate (as the VLA PPO preset), while the policy takes small steps. 16 sim envs at 64 px step about
# 140 env steps/s on 2 cores with the update; the student's sim success dips and comes back within
# about 10 iterations (a 3-minute sim-only trial went 0.56 -> 0.13 -> 0.75 in rollouts, 0.9 greedy).
IMAGE_PPO = ("policy.kind=cnn", f"policy.cameras=[{', '.join(IMAGE_CAMERAS)}]", "policy.activation=relu",
             "policy.value_head=true", "algo.update_epochs=2", "algo.num_minibatches=4",
             "run.torch_threads=2")  # fmt: skip
IMAGE_FINETUNE = ("algo.learning_rate=1.0e-4", "algo.critic_warmup_updates=5", "algo.value_learning_rate=3.0e-3",
                  "algo.clip_value_loss=false")  # fmt: skip
DR_IMAGE = f"{{{DR_DYNAMICS}, camera_pos_jitter_m: 0.02, camera_rot_jitter_deg: 3.0, light_intensity_scale: [0.5, 1.3], color_jitter: 0.1}}"


class BenchmarkError(ValueError):
    """Bad input, in one line."""


def load_gap(path: Path | None) -> dict:
    """The twin's randomisation (a fixed perturbation) as a plain dict for its driver config."""
    from robot_agent.drivers import make_driver
    from sim_envs.randomization import REALITY_GAP, DomainRandomization

    if path is None:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(REALITY_GAP).items()}
    try:
        profile = json.loads(path.read_text())
        DomainRandomization.from_any(profile)
        make_driver("sim-twin", Twin(profile).driver_section()).close()  # what the twin agents would refuse
    except (OSError, ValueError, TypeError) as exc:
        raise BenchmarkError(f"--gap {path}: {exc}") from None
    return profile


@dataclass(frozen=True)
class Twin:
    """What every twin agent of a run drives: the state task under ``gap`` (a randomisation profile),
    at ``action_scale`` (the driver's metres and radians per unit action; empty: its defaults)."""

    gap: dict
    action_scale: dict = field(default_factory=dict)
    previous_action: bool = False  # the agents send the action last chosen in the state
    cameras: tuple[str, ...] = ()  # an image policy's: then the state is proprioception only

    def driver_section(self) -> dict:
        return {"task": "pick_lift", "cameras": list(self.cameras), "image_size": IMAGE_SIZE,
                "privileged_state": not self.cameras, "randomization": self.gap, **self.action_scale}  # fmt: skip


# -- the "real robots" -------------------------------------------------------------------------
class TwinFleet:
    """``count`` twin agents as ``rlinf-robot connect`` processes dialling into ``port``. The first
    ``experts`` of them carry the sim's scripted expert as a teleop device that drives every tick (a
    person teleoperating the robot: grasps and lifts, whatever the trainer sends)."""

    def __init__(
        self, port: int, count: int, twin: Twin, work: Path, prefix: str, experts: int = 0,
        safety: dict | None = None,
    ) -> None:  # fmt: skip
        work.mkdir(parents=True, exist_ok=True)
        exe = str(Path(sys.executable).with_name("rlinf-robot"))
        self.processes = []
        for i in range(count):
            robot_id = f"{prefix}-{i}"
            config = work / f"{robot_id}.json"
            sections = {
                "driver": twin.driver_section(),
                "agent": {"spool_dir": str(work / f"spool-{robot_id}"),
                          "previous_action_in_state": twin.previous_action},
            }  # fmt: skip
            if i < experts:
                sections["teleop"] = {"kind": "expert", "mode": "always"}
            if safety:
                sections["safety"] = safety
            config.write_text(json.dumps(sections))
            command = [exe, "connect", "--server", f"127.0.0.1:{port}", "--robot", "sim-twin", "--insecure",
                       "--robot-config", str(config), "--robot-id", robot_id]  # fmt: skip
            log = open(work / f"{robot_id}.log", "w")  # noqa: SIM115 (closed with the process)
            self.processes.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), log))

    def stop(self) -> None:
        for process, _ in self.processes:
            process.send_signal(signal.SIGINT)
        for process, log in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
            log.close()


def serve_config(work: Path, *overrides: str):
    from trainer.server.config import load_serve_config

    return load_serve_config(None, ["server.insecure=true", "server.host=127.0.0.1", "server.port=0",
                                    f"data.record_dir={work / 'robot_episodes'}", 'data.sim_record_dir=""',
                                    f"log_dir={work / 'serve'}", *overrides])  # fmt: skip


def evaluate_on_twins(
    policy: Path, episodes: int, twins: int, twin: Twin, work: Path, safety: dict | None = None
) -> dict:
    """The policy, greedy, on ``twins`` twin agents until ``episodes`` episodes in all; ``safety``
    overrides the agents' safety limits (a diagnosis: which limit costs how much)."""
    from trainer.server.link_hosting import HostedLink, wait_for_robots
    from trainer.server.robot_eval import Evaluation, evaluate_on_robots

    with HostedLink(serve_config(work), mode="eval") as hosted:
        fleet = TwinFleet(hosted.server.port, twins, twin, work / "twins", "eval", safety=safety)
        try:
            wait_for_robots(hosted.server, twins, 120, "eval twins")
            per_robot = -(-episodes // twins)
            results = evaluate_on_robots(
                hosted.server, hosted.loop, Evaluation(str(policy), per_robot, True, work / "eval.json")
            )
        finally:
            fleet.stop()
    done = sum(r["episodes"] for r in results.values())
    return {"episodes": done, "success_rate": sum(r["successes"] for r in results.values()) / max(done, 1),
            "aborted": sum(r["aborted"] for r in results.values())}  # fmt: skip


# -- the arms ------------------------------------------------------------------------------------
def train_in_sim(work: Path, minutes: float, seed: int, kwargs: str, extra: list[str] | None = None) -> Path:
    from trainer.checkpoint import POLICY_DIR, latest_checkpoint
    from trainer.configs.loader import load_config
    from trainer.runner import Runner

    cfg = load_config("ppo_pick_lift", [f"env.kwargs={{{kwargs}}}", f"run.max_wall_minutes={minutes}",
                                        "run.total_env_steps=100000000", "run.eval_every=0", f"run.seed={seed}",
                                        f"run.output_dir={work / 'run'}", *(extra or [])])  # fmt: skip
    Runner(cfg).run()
    return latest_checkpoint(work / "run") / POLICY_DIR


def train_with_twins(
    work: Path, minutes: float, seed: int, twin: Twin, twins: int, overrides: list[str], **train
) -> Path:
    from trainer.checkpoint import POLICY_DIR, latest_checkpoint
    from trainer.server.train_mode import train as serve_train

    training = [f"run.max_wall_minutes={minutes}", "run.total_env_steps=100000000", "run.eval_every=0",
                f"run.seed={seed}", f"run.output_dir={work / 'run'}", *overrides]  # fmt: skip
    config = serve_config(work, "server.mode=train", f"train.min_robots={twins}", "train.wait_timeout_s=120",
                          f"train.overrides=[{', '.join(json.dumps(o) for o in training)}]",
                          *(f"train.{k}={v}" for k, v in train.items()))  # fmt: skip
    fleets = []
    try:
        serve_train(
            config,
            on_started=lambda link: fleets.append(TwinFleet(link.port, twins, twin, work / "twins", "train")),
        )
    finally:
        for fleet in fleets:
            fleet.stop()
    return latest_checkpoint(work / "run") / POLICY_DIR


def collect_twin_episodes(
    work: Path, count: int, twins: int, twin: Twin, seed: int, experts: int = 0, prefix: str = "sysid"
) -> Path:
    """``count`` twin episodes over the link (``serve`` collect mode): random actions, and on the first
    ``experts`` twins teleoperated grasps (``prefix``: the robot ids' prefix). Each benchmark seed collects episodes of its own (resets and
    actions from ``collect.seed``)."""
    from protos.lerobot_reader import read_info
    from trainer.server.serve import serve

    root = work / "robot_episodes"
    config = serve_config(work, "collect.policy=random", f"collect.episodes_per_robot={-(-count // twins)}",
                          f"collect.seed={seed * 1000}")  # fmt: skip
    ready, stop, state = threading.Event(), threading.Event(), {}
    thread = threading.Thread(
        target=serve, args=(config, stop), kwargs={"on_started": lambda s: (state.update(port=s.port), ready.set())},
        daemon=True,
    )  # fmt: skip
    thread.start()
    if not ready.wait(60):
        raise BenchmarkError("serve (collect mode) did not start listening within 60 s")
    fleet = TwinFleet(state["port"], twins, twin, work / "twins", prefix, experts)
    try:
        while not (root / "meta" / "info.json").is_file() or read_info(root)["total_episodes"] < count:
            if not thread.is_alive():
                raise BenchmarkError(f"serve (collect mode) stopped before the {prefix} episodes were in")
            time.sleep(1.0)
    finally:
        fleet.stop()
        stop.set()
        thread.join(60)
    return root


def fit_physics(work: Path, dataset: Path, action_scale: dict) -> tuple[Path, dict]:
    """``rlinf-calibrate sysid`` on the twin episodes in ``dataset``, replayed at ``action_scale``."""
    out = work / "physics.json"
    exe = str(Path(sys.executable).with_name("rlinf-calibrate"))
    scale = []
    if action_scale:
        scale = ["--action-scale", f"{action_scale['max_translation_m']},{action_scale['max_rotation_rad']}"]
    subprocess.run(
        [exe, "sysid", "--dataset", str(dataset), "--task", "pick_lift", *scale, "--out", str(out)],
        check=True,
    )
    return out, json.loads(out.read_text())["fit"]


def calibrate_cameras(work: Path, gap: dict) -> tuple[Path, dict]:
    """The twin's cameras measured as a person would on the robot, with ``rlinf-calibrate``: intrinsics,
    hand-eye (eye-to-hand for ``front``, eye-in-hand for ``wrist``) on the cameras where the gap mounts
    them, then ``apply-to-sim`` into one camera file. Returns it and each hand-eye's error against the
    true mount."""
    work.mkdir(parents=True, exist_ok=True)
    gap_file, cameras = work / "gap.json", work / "sim_cameras.json"
    gap_file.write_text(json.dumps(gap))
    exe = str(Path(sys.executable).with_name("rlinf-calibrate"))
    errors = {}
    for camera, mode in (("front", "eye-to-hand"), ("wrist", "eye-in-hand")):
        intrinsics, hand_eye, serial = (
            work / f"{camera}_intrinsics.json",
            work / f"{camera}_hand_eye.json",
            f"twin-{camera}",
        )
        for command in (
            ["intrinsics", "--sim-camera", camera, "--serial", serial, "--out", str(intrinsics)],
            ["hand-eye", "--mode", mode, "--sim", "--out", str(hand_eye)],
        ):
            subprocess.run([exe, *command, "--sim-gap", str(gap_file)], check=True)
        subprocess.run([exe, "apply-to-sim", "--camera", camera, "--intrinsics", str(intrinsics), "--serial", serial,
                        "--hand-eye", str(hand_eye), "--out", str(cameras)], check=True)  # fmt: skip
        errors[camera] = json.loads(hand_eye.read_text())["against_sim_truth"]
    return cameras, errors


def robot_learning_curve(dataset: Path, demos: Path | None = None) -> dict:
    """Robot episodes used (with the teleoperated demonstrations in ``demos``), and how many it took
    until the policy's last 10 episodes averaged >= 80 % success (the demonstrations count first)."""
    from protos.lerobot_reader import read_episodes

    def episodes(root: Path | None):
        if root is None or not (root / "meta" / "info.json").is_file():
            return [], []
        rows = read_episodes(root)
        return rows["success"].astype(float).tolist(), rows["aborted"].astype(bool).tolist()

    demo_success, _ = episodes(demos)
    success, aborted = episodes(dataset)
    policy = [s for s, a in zip(success, aborted) if not a]
    to_80 = next((i + 1 for i in range(9, len(policy)) if sum(policy[i - 9 : i + 1]) >= 8), None)
    return {"robot_episodes": len(demo_success) + len(success), "robot_demo_episodes": len(demo_success),
            "robot_demo_success": float(sum(demo_success) / len(demo_success)) if demo_success else None,
            "robot_episodes_to_80": None if to_80 is None else to_80 + len(demo_success)}  # fmt: skip


def robot_limits() -> str:
    """``--sim-robot-limits``: the twin agents' default safety limits (step length and rotation,
    target lead, orientation bound and lead) as the sim's kwargs, so the sim applies them as the robots do."""
    from robot_agent.safety import SafetyConfig

    return ", ".join(f"{name}: {value}" for name, value in SafetyConfig().sim_limits().items())


def action_scale(at_limits: bool) -> dict:
    """``--action-scale-at-limits``: a full action moves the arm by the agent's step caps (0.03 m,
    0.2 rad) rather than the default 0.05 m, 0.3 rad, which the agent cuts back to the caps. The sim
    and the twin drivers get the same scale. On its own it made the benchmark worse, as the policy's
    exploration noise, in action units, then moves the arm less; with ``--scale-noise-with-action``
    it trains faster and more reliably (``benchmarks/action_scale_ab.py``, README)."""
    if not at_limits:
        return {}
    from robot_agent.safety import SafetyConfig

    safety = SafetyConfig()
    return {"max_translation_m": safety.max_translation_m, "max_rotation_rad": safety.max_rotation_rad}


def noise_matched_to_scale(scale_m: float) -> float:
    """The initial log std at which a policy's exploration noise moves the arm as far at ``scale_m``
    per unit action as the default noise does at the sim's default scale (0.05 m)."""
    from policies.config import PolicyConfig
    from sim_envs.franka_env import FrankaEnvConfig

    return PolicyConfig().init_log_std + math.log(FrankaEnvConfig().max_translation_m / scale_m)


def ppo_noise(args) -> list[str]:
    """``--scale-noise-with-action`` (with ``--action-scale-at-limits``): the PPO arms' initial
    exploration noise scaled up by 0.05 / 0.03 (``benchmarks/action_scale_ab.py`` measured that)."""
    if not args.scale_noise_with_action:
        return []
    from robot_agent.safety import SafetyConfig

    return [f"policy.init_log_std={noise_matched_to_scale(SafetyConfig().max_translation_m):.4f}"]


def run_arm(arm: str, seed: int, args, gap: dict, work: Path, nominal: dict | None) -> dict:
    """One arm for one seed; ``nominal`` is this seed's ``sim_nominal`` row, where it ran first (the
    start of ``cotrain_finetune``, the teacher of ``sim_calibrated``)."""
    tick = time.monotonic()
    limits = f", {robot_limits()}" if args.sim_robot_limits else ""
    twin = Twin(gap, action_scale(args.action_scale_at_limits), args.previous_action)
    noise = ppo_noise(args)
    limits += "".join(f", {name}: {value}" for name, value in twin.action_scale.items())
    if args.previous_action:
        limits += ", previous_action_in_state: true"
    sim_kwargs = SIM_KWARGS + limits
    row: dict = {"arm": arm, "seed": seed}
    physics = None
    if args.teachers_from:
        teacher_arm = "sim_nominal" if arm == "sim_calibrated" else arm
        policy, physics = reused_state_policy(args.teachers_from / f"{teacher_arm}-{seed}", row)
    elif arm == "sim_calibrated" and nominal is not None and Path(nominal.get("teacher") or "").is_dir():
        policy = Path(nominal["teacher"])  # a state policy sees no camera: the arms differ in the student
        row["teacher_from"], row["teacher_train_wall_s"] = "sim_nominal", nominal["train_wall_s"]
    elif arm in ("sim_nominal", "sim_calibrated"):
        policy = train_in_sim(work, args.minutes, seed, sim_kwargs, noise)
    elif arm == "sim_dr":
        policy = train_in_sim(work, args.minutes, seed, f"{sim_kwargs}, randomization: {DR}", noise)
    elif arm == "sim_sysid":
        # sysid replays the robot's own state: its episodes are recorded without the previous action
        dataset = collect_twin_episodes(
            work / "sysid", args.sysid_episodes, 2, replace(twin, previous_action=False), seed,
            args.sysid_expert_twins,
        )  # fmt: skip
        physics, fit = fit_physics(work, dataset, twin.action_scale)
        row["sysid"] = {"params": json.loads(physics.read_text())["params"], "error_before": fit["error_before"],
                        "error_after": fit["error_after"], "robot_episodes": args.sysid_episodes}  # fmt: skip
        row["robot_episodes"] = args.sysid_episodes
        fitted, extra = f"{sim_kwargs}, physics_file: {physics}", list(noise)
        if args.physics_curriculum:  # nominal -> fitted physics, a step per success; evaluated at the fit
            fitted += f", physics_curriculum_successes: {args.physics_curriculum}"
            extra.append("env.eval_kwargs={physics_curriculum_successes: 0}")
        policy = train_in_sim(work, args.minutes, seed, fitted, extra)
    elif arm in ONLINE_ARMS:
        plan = online_arm(arm, args.policy, sim_kwargs, STUDENT_KWARGS + limits, noise, args.cotrain_sim_envs)
        twin = replace(twin, cameras=plan.cameras)
        overrides = list(plan.overrides)
        if arm == "cotrain_finetune":
            if nominal is None or not Path(nominal.get("policy") or "").is_dir():
                raise BenchmarkError("cotrain_finetune needs the sim_nominal arm first (same seed)")
            overrides.append(f"policy.init_from={nominal['policy']}")
            row["started_from"] = nominal["policy"]
        if arm == "twin_only":  # 20 demonstrations teleoperated on the robots, as HIL-SERL starts
            demos = collect_twin_episodes(work / "demos", 20, 2, twin, seed, experts=2, prefix="demo")
            overrides.append(f"algo.demo_dataset={demos}")
        weights = {"sim_weight": 0.0} if arm == "twin_only" else {"robot_weight": args.robot_weight}
        policy = train_with_twins(work, args.minutes, seed, twin, 2, overrides, config=plan.config, **weights)
    else:
        raise BenchmarkError(f"unknown arm {arm!r}; arms: {list(ARMS)}")
    row["train_wall_s"] = round(time.monotonic() - tick, 1)
    if args.policy == "image" and arm.startswith("sim_"):  # the state policy teaches a camera policy
        row["teacher"] = str(policy)
        student = STUDENT_KWARGS + limits
        if arm == "sim_dr":
            student += f", randomization: {DR_IMAGE}"
        elif arm == "sim_sysid":
            student += f", physics_file: {physics}"
        elif arm == "sim_calibrated":
            tick = time.monotonic()
            cameras, errors = calibrate_cameras(work / "calibration", gap)
            row["camera_calibration"] = {"camera_file": str(cameras), "hand_eye_error": errors,
                                         "wall_s": round(time.monotonic() - tick, 1)}  # fmt: skip
            student += f", camera_file: {cameras}"
        tick = time.monotonic()
        policy, row["distill"] = distill_to_image(work, policy, student, seed, args)
        row["distill_wall_s"] = round(time.monotonic() - tick, 1)
        twin = replace(twin, cameras=IMAGE_CAMERAS)
    if arm.startswith(("cotrain", "twin")):
        demos = work / "demos" / "robot_episodes" if arm == "twin_only" else None
        row.update(robot_learning_curve(work / "robot_episodes", demos))
    row.setdefault("robot_episodes", 0)
    row["policy"] = None if policy is None else str(policy)
    if policy is None:  # a teacher that never succeeded leaves no student to evaluate
        row["twin_eval"] = {"episodes": 0, "success_rate": 0.0, "aborted": 0}
    else:
        row["twin_eval"] = evaluate_on_twins(policy, args.eval_episodes, args.eval_twins, twin, work / "eval")
    if "robot_episodes_to_80" not in row:  # a sim-only arm: its robot episodes, if the twin eval reached 80 %
        row["robot_episodes_to_80"] = (
            row["robot_episodes"] if row["twin_eval"]["success_rate"] >= 0.8 else None
        )
    print(f"{arm} seed {seed}: twin success {row['twin_eval']['success_rate']:.2f} over "
          f"{row['twin_eval']['episodes']} episodes; robot episodes {row['robot_episodes']}", flush=True)  # fmt: skip
    return row


@dataclass(frozen=True)
class OnlineArm:
    """How an arm that learns on the twins trains: its config, its overrides, the twins' cameras."""

    config: str
    overrides: tuple[str, ...]
    cameras: tuple[str, ...] = ()


def online_arm(
    arm: str, policy: str, sim_kwargs: str, student_kwargs: str, noise: list[str], sim_envs: int = 16
) -> OnlineArm:
    """``cotrain_*``: PPO on ``sim_envs`` sim envs + the twins; ``twin_only``: RLPD as HIL-SERL runs it, on the
    twins alone after 20 teleoperated demonstrations (the twins' expert teleop device grasps the cube
    where it is, as a person would; the pool's one sim env has weight 0). ``policy="image"``: a CNN
    policy on 64 px front and wrist cameras, which the twins stream and the demonstrations record;
    ``cotrain_finetune`` then takes small steps from ``sim_nominal``'s student (``IMAGE_FINETUNE``)."""
    image = policy == "image"
    cameras = IMAGE_CAMERAS if image else ()
    env_kwargs = student_kwargs if image else sim_kwargs
    if arm == "twin_only":
        return OnlineArm(
            "rlpd_pick_lift_image" if image else "rlpd_pick_lift",
            (
                "env.num_envs=1",
                f"env.kwargs={{{env_kwargs}}}",
                "algo.learning_starts=400",
                "algo.demo_episodes=0",
            ),
            cameras,
        )
    if arm not in ("cotrain_scratch", "cotrain_finetune"):
        raise BenchmarkError(f"{arm!r} trains in the sim alone; online arms: {list(ONLINE_ARMS)}")
    tuning = (*IMAGE_PPO, *(IMAGE_FINETUNE if arm == "cotrain_finetune" else ())) if image else tuple(noise)
    return OnlineArm(
        "ppo_pick_lift", (f"env.num_envs={sim_envs}", f"env.kwargs={{{env_kwargs}}}", *tuning), cameras
    )


def reused_state_policy(earlier: Path, row: dict) -> tuple[Path, Path | None]:
    """``--teachers-from``: the state policy an earlier run of this benchmark trained for this arm and
    seed (its latest checkpoint), and for ``sim_sysid`` the physics it fitted (whose robot episodes
    this arm then counts)."""
    from protos.lerobot_reader import read_info
    from trainer.checkpoint import POLICY_DIR, latest_checkpoint

    checkpoint = latest_checkpoint(earlier / "run")
    if checkpoint is None:
        raise BenchmarkError(f"--teachers-from: no trained state policy under {earlier / 'run'}")
    row["teacher_from"] = str(earlier)
    metrics = earlier / "run" / "metrics.jsonl"
    logged = metrics.read_text().splitlines() if metrics.is_file() else []
    # how long the teacher trained (this row's train_wall_s is the time to find it)
    row["teacher_train_wall_s"] = json.loads(logged[-1])["wall_s"] if logged else None
    physics = earlier / "physics.json"
    if row["arm"] == "sim_sysid":
        if not physics.is_file():
            raise BenchmarkError(f"--teachers-from: {earlier} has no physics.json (a sim_sysid run's fit)")
        fitted = json.loads(physics.read_text())
        robot_episodes = read_info(earlier / "sysid" / "robot_episodes")["total_episodes"]
        row["sysid"] = {"params": fitted["params"], "error_before": fitted["fit"]["error_before"],
                        "error_after": fitted["fit"]["error_after"], "robot_episodes": robot_episodes}  # fmt: skip
        row["robot_episodes"] = robot_episodes
    return checkpoint / POLICY_DIR, physics if physics.is_file() else None


def distill_to_image(
    work: Path, teacher: Path, student_kwargs: str, seed: int, args
) -> tuple[Path | None, dict]:
    """Teacher-student distillation in the arm's own sim: ``--distill-episodes`` successful episodes
    played by the state policy ``teacher`` (with DART noise ``--distill-noise``) are recorded as the
    image policy sees them (64 px front and wrist cameras, proprioception), then a CNN policy is
    cloned from them for ``--distill-minutes``. A teacher that never succeeds leaves no student (None)."""
    import yaml

    from trainer.checkpoint import POLICY_DIR, latest_checkpoint
    from trainer.configs.loader import load_config
    from trainer.expert_demos import DEMO_SEED, DemoConfig, record_expert_demos
    from trainer.runner import Runner

    dataset = work / "distill"
    config = DemoConfig("rlinf/FrankaPickLift-v0", args.distill_episodes, str(dataset), DEMO_SEED + 1000 * seed,
                        True, yaml.safe_load(f"{{{student_kwargs}}}"), args.distill_noise, str(teacher))  # fmt: skip
    try:
        summary = record_expert_demos(config)
        recorded = {"episodes": summary.written, "played": summary.played, "frames": summary.frames}
    except RuntimeError as exc:  # a weak teacher: clone what it did get right
        from protos.lerobot_reader import read_info

        if not (dataset / "meta" / "info.json").is_file():  # no student: it scores nothing on the twin
            return None, {"episodes": 0, "no_student": str(exc)}
        info = read_info(dataset)
        recorded = {"episodes": info["total_episodes"], "frames": info["total_frames"], "short": str(exc)}
    Runner(load_config("bc_reach_image", [
        "env.id=rlinf/FrankaPickLift-v0", f"env.kwargs={{{student_kwargs}}}", "env.num_envs=2",
        f"policy.cameras=[{', '.join(IMAGE_CAMERAS)}]", f"algo.dataset={dataset}", "algo.batch_size=64",
        f"algo.updates_per_iteration={STUDENT_UPDATES_PER_ITERATION}", "algo.image_shift=4",
        f"run.max_wall_minutes={args.distill_minutes}", "run.total_env_steps=100000000", f"run.seed={seed}",
        f"run.output_dir={work / 'student'}",
    ])).run()  # fmt: skip
    final = json.loads((work / "student" / "final_eval.json").read_text())
    recorded["student_sim_success"] = final["success_rate"]  # greedy, in the arm's own sim
    recorded["student_updates"] = final["iteration"] * STUDENT_UPDATES_PER_ITERATION
    return latest_checkpoint(work / "student") / POLICY_DIR, recorded


def summarise(rows: list[dict]) -> dict:
    import numpy as np

    summary = {}
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        rates = [r["twin_eval"]["success_rate"] for r in mine]
        to_80 = [r.get("robot_episodes_to_80") for r in mine]
        summary[arm] = {"twin_success_median": float(np.median(rates)), "twin_success": rates,
                        "robot_episodes": [r["robot_episodes"] for r in mine], "robot_episodes_to_80": to_80}  # fmt: skip
    if "sim_nominal" in summary:
        base = summary["sim_nominal"]["twin_success_median"]
        best = max(summary, key=lambda a: summary[a]["twin_success_median"])
        summary["best_arm"] = {"arm": best, "points_over_sim_nominal": 100 * (summary[best]["twin_success_median"] - base),
                               "target_points": 20}  # fmt: skip
    return summary


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [a for a in summary if a != "best_arm"]
    figure, ax = plt.subplots(figsize=(8, 3.5))
    for i, arm in enumerate(arms):
        rates = summary[arm]["twin_success"]
        ax.bar(i, summary[arm]["twin_success_median"], color="#4c72b0", alpha=0.7)
        ax.plot([i] * len(rates), rates, "ko", ms=4)
    ax.set_xticks(range(len(arms)), arms, rotation=20, fontsize=8)
    ax.set_ylabel("success on the twin")
    ax.set_ylim(0, 1)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=8.0, help="training wall-clock budget per arm")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--eval-twins", type=int, default=5, help="twin agents evaluating at once")
    parser.add_argument("--sysid-episodes", type=int, default=20)
    parser.add_argument(
        "--robot-weight",
        type=float,
        default=2.0,
        help="co-training arms: how many times a robot transition counts a sim one's in the update",
    )
    parser.add_argument(
        "--cotrain-sim-envs",
        type=int,
        default=16,
        help="co-training arms: sim envs beside the 2 twins (the pool steps them in lockstep with the "
        "twins' 100 ms ticks, so a pool step longer than a tick costs the twins whole ticks)",
    )
    parser.add_argument(
        "--sim-robot-limits",
        action="store_true",
        help="the sim applies the twin agents' safety limits (step length, target lead) as they do",
    )
    parser.add_argument(
        "--action-scale-at-limits",
        action="store_true",
        help="a full action moves the arm by the agent's step caps (sim and twins), not past them",
    )
    parser.add_argument(
        "--scale-noise-with-action",
        action="store_true",
        help="with --action-scale-at-limits: the PPO arms' initial exploration noise scaled up by "
        "0.05 / 0.03, so it moves the arm as far as at the default scale",
    )
    parser.add_argument(
        "--previous-action",
        action="store_true",
        help="the sims and the twin agents end the state with the action last applied "
        "(previous_action_in_state): with control latency, the state is not Markov without it",
    )
    parser.add_argument(
        "--physics-curriculum",
        type=int,
        default=0,
        metavar="N",
        help="the sysid arm's sim envs start at nominal physics and reach the fitted physics after N "
        "successful episodes each (physics_curriculum_successes; 0: the fitted physics throughout)",
    )
    parser.add_argument(
        "--sysid-expert-twins",
        type=int,
        default=1,
        choices=(0, 1, 2),
        help="of the 2 twins that record the sysid episodes, how many are teleoperated (grasps, which "
        "the cube's friction and mass show in; random actions seldom touch the cube)",
    )
    parser.add_argument(
        "--policy",
        choices=("state", "image"),
        default="state",
        help="image: each sim-only arm's state policy teaches a CNN policy on 64 px front and wrist "
        "cameras in the arm's own sim (DART episodes, then BC), and that student is evaluated",
    )
    parser.add_argument(
        "--teachers-from",
        type=Path,
        help="reuse the state policies (and sim_sysid's fit) an earlier run trained in this work folder, "
        "instead of training them again",
    )
    parser.add_argument("--distill-episodes", type=int, default=60, help="--policy image: teacher episodes")
    parser.add_argument(
        "--distill-noise", type=float, default=0.2, help="--policy image: DART noise (action units)"
    )
    parser.add_argument(
        "--distill-minutes", type=float, default=4.0, help="--policy image: BC wall-clock budget"
    )
    parser.add_argument(
        "--arms", nargs="+", help="default: every arm (--policy image: the sim-only ones, sim_calibrated too)"
    )
    parser.add_argument("--gap", type=Path, help="the twin's reality gap: a JSON of randomisation keys")
    parser.add_argument("--work", type=Path, default=Path("runs/bench-sim-to-real"))
    parser.add_argument("--out", type=Path, default=RESULTS / "sim_to_real.json")
    parser.add_argument(
        "--update",
        action="store_true",
        help="keep --out's other runs, replace these arms' rows for these seeds",
    )
    parser.add_argument(
        "--reevaluate",
        action="store_true",
        help="evaluate --out's saved policies of these arms and seeds again on the twins (no training)",
    )
    parser.add_argument(
        "--twin-safety",
        help="with --reevaluate: a JSON of agent safety settings for the evaluating twins, e.g. "
        "'{\"max_target_lead_m\": 0.2}'; the figures go beside the row's own",
    )
    parser.add_argument(
        "--eval-gap",
        type=Path,
        help="with --reevaluate: the evaluating twins take this gap profile instead of the one the "
        "policies were trained against (how far a policy carries); the figures go beside the row's own",
    )
    parser.add_argument(
        "--why",
        help="with --reevaluate (no diagnosis): why the figures are replaced, kept in the result's settings",
    )
    args = parser.parse_args()
    if (args.twin_safety or args.eval_gap) and not args.reevaluate:
        parser.error("--twin-safety and --eval-gap go with --reevaluate")
    if args.twin_safety and args.eval_gap:
        parser.error("one diagnosis at a time: --twin-safety or --eval-gap")
    if args.robot_weight <= 0:
        parser.error(f"--robot-weight must be > 0, got {args.robot_weight:g}")
    if args.cotrain_sim_envs < 1:
        parser.error(f"--cotrain-sim-envs must be >= 1, got {args.cotrain_sim_envs}")
    if args.scale_noise_with_action and not args.action_scale_at_limits:
        parser.error("--scale-noise-with-action goes with --action-scale-at-limits")
    if args.arms is None:
        args.arms = [
            a for a in ARMS if (a.startswith("sim_") if args.policy == "image" else a != "sim_calibrated")
        ]
    if args.reevaluate:
        return reevaluate(args)
    try:
        gap = load_gap(args.gap)
        unknown = [a for a in args.arms if a not in ARMS]
        if unknown:
            raise BenchmarkError(f"unknown arm {unknown[0]!r}; arms: {list(ARMS)}")
        check_arm_choices(args)
    except BenchmarkError as exc:
        print(f"sim_to_real: {exc}", file=sys.stderr)
        return 2
    rows = []
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    if args.update and args.out.is_file():  # keep the other runs' rows, and their runs (a finetune's start)
        rows = [
            r
            for r in json.loads(args.out.read_text())["runs"]
            if r["arm"] not in args.arms or r["seed"] not in seeds
        ]
    try:
        check_finetune_starts(args, rows, seeds)
    except BenchmarkError as exc:
        print(f"sim_to_real: {exc}", file=sys.stderr)
        return 2
    if not (args.update and args.out.is_file()):
        shutil.rmtree(args.work, ignore_errors=True)
    for seed in seeds:
        nominal = next((r for r in rows if r["arm"] == "sim_nominal" and r["seed"] == seed), None)
        for arm in args.arms:
            shutil.rmtree(args.work / f"{arm}-{seed}", ignore_errors=True)
            row = run_arm(arm, seed, args, gap, args.work / f"{arm}-{seed}", nominal)
            if arm == "sim_nominal":
                nominal = row
            rows.append(row)
            write(args, gap, rows)
    summary = write(args, gap, rows)
    print(json.dumps(summary, indent=2))
    return 0


def check_finetune_starts(args, rows: list[dict], seeds: range) -> None:
    """``cotrain_finetune`` starts from this seed's ``sim_nominal`` policy: one this run trains first,
    or one in ``--out``'s rows (``--update``)."""
    if "cotrain_finetune" not in args.arms:
        return
    if "sim_nominal" in args.arms[: args.arms.index("cotrain_finetune")]:
        return
    for seed in seeds:
        start = next((r for r in rows if r["arm"] == "sim_nominal" and r["seed"] == seed), None)
        if start is None or not Path(start.get("policy") or "").is_dir():
            raise BenchmarkError(
                f"cotrain_finetune starts from sim_nominal's policy, and seed {seed} has none: run "
                f"sim_nominal first (--arms sim_nominal cotrain_finetune), or --update an --out that has it"
            )


def check_arm_choices(args) -> None:
    """``sim_calibrated`` goes with ``--policy image``; ``--teachers-from`` takes the sim-only arms, and
    never the folder it reuses."""
    online = [a for a in args.arms if not a.startswith("sim_")]
    if "sim_calibrated" in args.arms and args.policy != "image":
        raise BenchmarkError(
            "sim_calibrated calibrates the cameras, which a state policy never sees: it goes with --policy image"
        )
    if args.teachers_from is not None:
        if online:
            raise BenchmarkError(f"--teachers-from reuses sim-only arms' state policies; not {online[0]!r}")
        if args.teachers_from.resolve() == args.work.resolve() and not args.update:
            raise BenchmarkError(
                "--teachers-from is --work, which this run would clear first; give another --work"
            )


def reevaluate(args) -> int:
    """The saved policies in ``--out``'s rows (of ``--arms``, seeds from ``--first-seed``), evaluated
    again on twins with the gap they were trained against; the old figures are kept beside the new.
    With ``--twin-safety`` or ``--eval-gap`` (a diagnosis: another limit, another robot) the figures
    go beside the row's own, which stay as they are."""
    from protos.atomic_files import write_atomic

    if not (args.twin_safety or args.eval_gap or args.why):
        print(
            "sim_to_real: --reevaluate replaces the rows' figures: say why with --why TEXT", file=sys.stderr
        )
        return 2
    if not args.out.is_file():
        print(f"sim_to_real: --reevaluate needs a result file, and {args.out} is not one", file=sys.stderr)
        return 2
    result = json.loads(args.out.read_text())
    try:
        gap = load_gap(args.eval_gap) if args.eval_gap else result["gap"]
    except BenchmarkError as exc:
        print(f"sim_to_real: {exc}", file=sys.stderr)
        return 2
    safety = json.loads(args.twin_safety) if args.twin_safety else None
    diagnosis = None  # (field, key) where a diagnosis's figures go beside the row's own
    if safety:
        diagnosis = ("twin_eval_with_safety", json.dumps(safety, sort_keys=True))
    elif args.eval_gap:
        diagnosis = ("twin_eval_on_gap", args.eval_gap.name)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for row in result["runs"]:
        if row["arm"] not in args.arms or row["seed"] not in seeds or row["policy"] is None:
            continue
        work = Path(result["settings"]["work"]) / f"{row['arm']}-{row['seed']}" / "reeval"
        shutil.rmtree(work, ignore_errors=True)
        settings = result["settings"]
        twin = Twin(
            gap,
            action_scale(settings.get("action_scale_at_limits", False)),
            settings.get("previous_action", False),
            IMAGE_CAMERAS if settings.get("policy") == "image" else (),
        )
        figures = evaluate_on_twins(
            Path(row["policy"]), args.eval_episodes, args.eval_twins, twin, work, safety
        )
        previous = row["twin_eval"]
        if diagnosis:
            row.setdefault(diagnosis[0], {})[diagnosis[1]] = figures
        else:
            row["twin_eval"] = figures
            row.setdefault("twin_eval_before_reevaluation", previous)
            row["reevaluated_because"] = args.why
            result["summary"] = summarise(result["runs"])
            reevaluations = result["settings"].setdefault("reevaluations", [])
            if "reevaluated" in result["settings"]:  # the one record an older run kept
                reevaluations.append(result["settings"].pop("reevaluated"))
            record = {"eval_episodes": args.eval_episodes, "eval_twins": args.eval_twins, "why": args.why}
            if record not in reevaluations:
                reevaluations.append(record)
        print(f"{row['arm']} seed {row['seed']}{f' ({diagnosis[0]}: {diagnosis[1]})' if diagnosis else ''}: twin success "
              f"{previous['success_rate']:.2f} -> {figures['success_rate']:.2f}", flush=True)  # fmt: skip
        write_atomic(args.out, json.dumps(result, indent=2) + "\n")
        plot(result["summary"], args.out.with_suffix(".png"))
    print(json.dumps(result["summary"], indent=2))
    return 0


def write(args, gap: dict, rows: list[dict]) -> dict:
    summary = summarise(rows)
    policy = (
        "state policy"
        if args.policy == "state"
        else f"{IMAGE_SIZE} px image policy distilled from the state policy"
    )
    task = f"FrankaPickLift, {policy}, sim twin agents over the gRPC link at 10 Hz"
    write_result(args, "sim_to_real", task, gap, rows, summary)
    plot(summary, args.out.with_suffix(".png"))
    return summary


def write_result(args, benchmark: str, task: str, gap: dict, rows: list[dict], summary: dict) -> None:
    """``args.out``: the runs so far, their summary and the settings, written whole."""
    from protos.atomic_files import write_atomic

    result = {
        "benchmark": benchmark,
        "task": task,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "gap": gap,
        "runs": rows,
        "summary": summary,
    }
    write_atomic(args.out, json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
