"""The ``rlinf-trainer serve`` config: typed sections, every key checked, ``key=value`` overrides."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from protos.lerobot_dataset import VideoFormat
from trainer.configs.loader import ConfigError, load_structured
from trainer.configs.paths import require_writable_dir
from trainer.server.frame_decoder import FRAME_DECODE_DEVICES
from trainer.server.link_budgets import LinkLimits

MODES = ("collect", "eval", "train", "dagger")
COLLECT_POLICIES = ("random", "hold")


@dataclass
class ServerSection:
    """Where the robot link listens and how agents authenticate."""

    host: str = ""  # "": every interface (0.0.0.0) with TLS, loopback only (127.0.0.1) when insecure
    port: int = 50051  # the robot link's TCP port (0: any free one)
    mode: str = "collect"  # collect, eval, train or dagger
    token_file: str = ""  # a file holding the shared token every agent must send
    tls_cert: str = ""  # the trainer's certificate (PEM)
    tls_key: str = ""  # its private key (PEM)
    client_ca: str = ""  # set: mutual TLS; each robot registers as its certificate's common name
    robot_tokens_file: str = ""  # JSON {robot_id: token}: each robot id bound to a token of its own
    insecure: bool = False  # no TLS, no token (--insecure): trusted networks only
    max_session_bytes: int = 4 << 30  # refuse a robot whose spec could make its session hold more
    reflection: bool = False  # gRPC server reflection (lists the services; asks for the token)
    health_requires_token: bool = False  # False: load balancers and probes may check health without one
    view: str = ""  # "rerun": show the live robots (cameras, state, actions) in rerun (the view extra)
    view_save: str = ""  # with view=rerun: write an .rrd file here instead of spawning the viewer
    frame_decode: str = "auto"  # robots' JPEG frames: auto (GPU nvJPEG when there), cpu, cuda
    # What one credential, host or robot may cost (trainer/server/link_budgets.py). A lab of 16
    # robots on one token behind one NAT is far below the caps; 0 rates follow each robot's spec.
    max_sessions_per_credential: int = 64  # per token or client certificate
    max_sessions_per_peer: int = 64  # per robot host (address)
    max_sessions: int = 256  # sessions in all
    register_timeout_s: float = 10.0  # a connected agent must register within this
    handshake_timeout_s: float = 5.0  # a connection must finish TLS / HTTP/2 within this
    max_messages_per_s: float = 0.0  # per robot; 0: 4 x its control_hz + 50
    max_bytes_per_s: float = 0.0  # per robot; 0: 4 x its largest observation x its control_hz (>= 8 MB/s)
    # Sessions refused or ended on a bad message, per credential and host: past these rates the next
    # session from there waits, unread (the refused bytes count too).
    bad_sessions_per_s: float = 5.0
    bad_bytes_per_s: float = 2.0 * 2**20  # see bad_sessions_per_s

    def link_limits(self) -> LinkLimits:
        values = {
            "max_sessions_per_credential": self.max_sessions_per_credential,
            "max_sessions_per_peer": self.max_sessions_per_peer,
            "max_sessions": self.max_sessions,
            "register_timeout_s": self.register_timeout_s,
            "handshake_timeout_s": self.handshake_timeout_s,
            "bad_sessions_per_s": self.bad_sessions_per_s,
            "bad_bytes_per_s": self.bad_bytes_per_s,
        }
        for key, value in values.items():
            if not value > 0:
                raise ConfigError(f"server.{key} must be > 0, got {value}")
        if min(self.max_messages_per_s, self.max_bytes_per_s) < 0:
            raise ConfigError(
                "server.max_messages_per_s and server.max_bytes_per_s must be >= 0 (0: from the spec)"
            )
        return LinkLimits(**values, messages_per_s=self.max_messages_per_s, bytes_per_s=self.max_bytes_per_s)


@dataclass
class DataSection:
    """Where episodes are recorded (a LeRobot v3 dataset)."""

    record_dir: str = "runs/dataset"  # the LeRobot v3 dataset every robot episode is written to
    # The dataset's schema (cameras, state, action): a JSON env spec (EnvSpec.to_dict) or a LeRobot
    # dataset to take it from. Robots that do not fit are refused, whoever connected first.
    # "": the dataset's own once it has episodes, else the first robot's (a warning says so).
    features: str = ""
    video_codec: str = "libx264"  # the camera streams' codec (PyAV name)
    video_pix_fmt: str = "yuv420p"  # yuv444p keeps the colour of one-pixel targets in small sim images
    video_crf: int = -1  # -1: the codec's default; 0: lossless (libx264)

    def video_format(self) -> VideoFormat:
        return VideoFormat(
            self.video_codec, self.video_pix_fmt, None if self.video_crf < 0 else self.video_crf
        )

    # train mode: the sim envs' episodes, in their own dataset ("": not recorded)
    sim_record_dir: str = "runs/dataset-sim"


@dataclass
class CollectSection:
    """What drives the robots in ``collect`` mode. An agent's teleop device overrides it while the human
    holds the take-over; ``hold`` (keep the arm still) is for pure demonstrations."""

    policy: str = "random"  # random or hold (keep the arm still unless a human drives)
    action_scale: float = 0.3  # random actions are uniform in [-scale, scale]
    episodes_per_robot: int = 0  # 0: until the server stops
    seed: int = 0  # the first reset seed of the server-wide sequence


@dataclass
class EvalSection:
    """A fixed policy (saved with ``Policy.save``) run on every robot, with success statistics."""

    policy_path: str = ""  # the saved policy to run (a checkpoint's policy/ folder)
    episodes_per_robot: int = 10  # episodes each robot plays
    # Serve prints the results and exits once this many robots have played their episodes (0: keep
    # serving until stopped, evaluating every robot that connects).
    robots: int = 1
    greedy: bool = True  # the policy's mean action, not a sample
    results_file: str = ""  # default: <log_dir>/eval.json


@dataclass
class OpenpiSection:
    """``eval`` mode can also answer openpi's websocket clients (``openpi_client.WebsocketClientPolicy``)
    with ``eval.policy_path``: robots that already run openpi's client get the policy with no change on
    their side. Such a robot has none of rlinf-robot's local safety unless its own client provides it."""

    port: int = 0  # 0: off; openpi's own examples use 8000
    # openpi observation key -> the policy's camera, e.g. {"observation/image": front}
    images: dict[str, str] = field(default_factory=dict)
    state: str = "observation/state"  # the observation key that holds the state vector
    prompt: str = "prompt"  # the observation key that holds the instruction (the spec's own when absent)


@dataclass
class LerobotSection:
    """``eval`` mode can also answer LeRobot's async-inference robot clients
    (``lerobot.async_inference.robot_client``) with ``eval.policy_path``, whatever policy they name.
    LeRobot's client speaks plaintext gRPC and sends no token: only ``allowed_peers`` are answered.
    Such a robot has none of rlinf-robot's local safety unless its own client provides it."""

    port: int = 0  # 0: off; LeRobot's own examples use 8080
    # the robot's camera name (a key of its observation) -> the policy's camera, e.g. {front: front}
    images: dict[str, str] = field(default_factory=dict)
    # addresses or networks whose clients are answered (every other one is refused)
    allowed_peers: list[str] = field(default_factory=lambda: ["127.0.0.1/32", "::1/128"])
    obs_queue_timeout_s: float = 2.0  # GetActions waits this long for an observation (LeRobot's default)
    # an observation whose state is closer than this to the last one answered is skipped unless the
    # robot's action queue ran empty (LeRobot's server's rule, in the robot's state units)
    similar_state_atol: float = 1.0


@dataclass
class TrainSection:
    """``train`` mode: a training config (as for ``rlinf-trainer train``) run on sim envs + robots."""

    config: str = "ppo_reach"  # a preset name or a YAML path
    overrides: list[str] = field(default_factory=list)  # key=value for the training config
    sim_weight: float = 1.0  # sampling weight of sim transitions
    robot_weight: float = 1.0  # sampling weight of robot transitions
    min_robots: int = 0  # wait for this many robots before the first iteration
    wait_timeout_s: float = 600.0  # how long to wait for train.min_robots before giving up (exit 2)
    step_timeout_s: float = 10.0  # a robot that sends nothing for this long is dropped for the iteration
    resume: bool = False  # continue the run in run.output_dir from its newest checkpoint
    # After the last iteration: the final policy, greedy, for this many episodes on every connected
    # robot -> <run dir>/robot_eval.json (0: none).
    final_eval_episodes: int = 0


@dataclass
class DaggerSection:
    """``dagger`` mode: rounds of robot episodes under the policy, with a human (or expert) helping,
    each followed by a behaviour-cloning fit on everything recorded so far (see trainer/server/dagger.py)."""

    policy_path: str = ""  # the starting policy (a Policy.save folder, e.g. a checkpoint's policy/)
    rounds: int = 5  # rounds of episodes + a BC refit
    episodes_per_round: int = 4  # per robot
    min_robots: int = 1  # robots to wait for before the first round
    wait_timeout_s: float = 600.0  # how long to wait for them
    only_interventions: bool = True  # HG-DAgger; false: DAgger on every labelled frame
    action_key: str = "complementary_info.human_action"  # the human's (or expert's) action is the label
    datasets: list[str] = field(default_factory=list)  # more LeRobot v3 datasets to fit on (e.g. demos)
    updates_per_round: int = 500  # BC updates after each round
    learning_rate: float = 1e-3  # BC's Adam step size
    batch_size: int = 256  # BC's frames per update
    greedy: bool = True  # the policy acts with its mean action
    seed: int = 0  # the rounds' reset seeds and BC's batches
    output_dir: str = ""  # default: <log_dir>/dagger


# Algorithms whose iterations can consume robots. GRPO needs groups of envs reset to the same seed,
# which a real robot cannot replay.
POOL_ALGORITHMS = ("ppo", "sac", "rlpd")


REWARD_SOURCES = ("env", "classifier", "human")


@dataclass
class RewardSection:
    """Where a robot's rewards come from in ``train`` mode.

    ``env``: the agent's own (a sim twin's task reward; a real arm reports 0). ``classifier``: a
    success classifier (``rlinf-trainer train --config reward_classifier``) judges every frame; reward 1
    and the episode ends once ``consecutive_frames`` frames in a row score above the threshold.
    ``human``: the teleop device's success/failure label ends the episode with reward 1 or 0.
    """

    source: str = "env"  # env, classifier or human (see above)
    classifier: str = ""  # the classifier folder (a reward_classifier run's classifier/)
    threshold: float = 0.0  # 0: the classifier's own
    # classifier: frames in a row above the threshold that end an episode as success
    consecutive_frames: int = 3


@dataclass
class ServeConfig:
    server: ServerSection = field(default_factory=ServerSection)
    data: DataSection = field(default_factory=DataSection)
    collect: CollectSection = field(default_factory=CollectSection)
    eval: EvalSection = field(default_factory=EvalSection)
    train: TrainSection = field(default_factory=TrainSection)
    dagger: DaggerSection = field(default_factory=DaggerSection)
    reward: RewardSection = field(default_factory=RewardSection)
    openpi: OpenpiSection = field(default_factory=OpenpiSection)
    lerobot: LerobotSection = field(default_factory=LerobotSection)
    log_dir: str = "runs/serve"  # TensorBoard figures per robot


SERVE_PRESET_DIR = Path(__file__).resolve().parents[1] / "configs" / "serve"


def serve_preset_names() -> list[str]:
    return sorted(p.stem for p in SERVE_PRESET_DIR.glob("*.yaml"))


def resolve_serve_config(name_or_path: str) -> Path:
    """A YAML path, or the name of a preset in ``trainer/configs/serve/`` (e.g. ``cotrain_pick_lift``)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    preset = SERVE_PRESET_DIR / f"{name_or_path}.yaml"
    if path.suffix not in (".yaml", ".yml") and preset.is_file():
        return preset
    raise ConfigError(f"config file {name_or_path} does not exist; serve presets: {serve_preset_names()}")


def load_serve_config(path: str | None, overrides: list[str] | None = None) -> ServeConfig:
    config = load_structured(ServeConfig, resolve_serve_config(path) if path else None, overrides)
    if config.server.mode not in MODES:
        raise ConfigError(f"server.mode must be one of {MODES}, got {config.server.mode!r}")
    if config.server.frame_decode not in FRAME_DECODE_DEVICES:
        raise ConfigError(
            f"server.frame_decode must be one of {FRAME_DECODE_DEVICES}, got {config.server.frame_decode!r}"
        )
    if config.server.mode == "train":
        training = training_config(config)
        if training.algorithm not in POOL_ALGORITHMS:
            raise ConfigError(
                f"server.mode=train runs {POOL_ALGORITHMS} on robots; {training.algorithm!r} cannot "
                "(GRPO's groups replay one seed, which a real robot cannot)"
            )
        if training.env.num_envs < 1:
            raise ConfigError(
                "server.mode=train needs env.num_envs >= 1 sim env (the pool's spec comes from it)"
            )
        if training.cluster.placement != "sequential":
            raise ConfigError(
                f"server.mode=train needs cluster.placement=sequential, got "
                f"{training.cluster.placement!r}: the robots join the env pool in this process, which "
                "the Ray placements do not drive (they would train on sim envs alone)"
            )
        check_reward(config.reward)
        if min(config.train.sim_weight, config.train.robot_weight) < 0:
            raise ConfigError("train.sim_weight and train.robot_weight must be >= 0")
        if config.train.final_eval_episodes < 0 or config.train.min_robots < 0:
            raise ConfigError("train.final_eval_episodes and train.min_robots must be >= 0")
    if config.server.mode == "eval" and not is_saved_policy(config.eval.policy_path):
        raise ConfigError(
            f"server.mode=eval needs eval.policy_path, a saved policy (Policy.save's folder); got {config.eval.policy_path!r}"
        )
    if config.eval.robots < 0 or config.eval.episodes_per_robot < 1:
        raise ConfigError(
            f"eval.robots must be >= 0 (0: keep serving) and eval.episodes_per_robot >= 1; got "
            f"{config.eval.robots} and {config.eval.episodes_per_robot}"
        )
    if config.openpi.port and config.server.mode != "eval":
        raise ConfigError("openpi.port serves eval.policy_path: it needs server.mode=eval")
    if config.lerobot.port and config.server.mode != "eval":
        raise ConfigError("lerobot.port serves eval.policy_path: it needs server.mode=eval")
    for peer in config.lerobot.allowed_peers:
        try:
            ipaddress.ip_network(peer, strict=False)
        except ValueError:
            raise ConfigError(
                f"lerobot.allowed_peers: {peer!r} is not an address or network (10.0.0.0/24)"
            ) from None
    if config.server.mode == "dagger":
        check_dagger(config)
    if config.collect.policy not in COLLECT_POLICIES:
        raise ConfigError(f"collect.policy must be one of {COLLECT_POLICIES}, got {config.collect.policy!r}")
    if not config.data.record_dir:
        raise ConfigError("data.record_dir must name the dataset folder")
    require_writable_dir(config.data.record_dir, "data.record_dir")  # not at the first episode's store
    require_writable_dir(config.log_dir, "log_dir")
    config.server.link_limits()  # its one-line errors now, not when the link starts
    run_features(config.data)
    return config


def run_features(data: DataSection) -> dict | None:
    """``data.features`` in :func:`protos.episode_frames.features_of`'s form (None when unset)."""
    import json

    from protos.env_spec import EnvSpec
    from protos.episode_frames import dataset_features, features_of

    if not data.features:
        return None
    path = Path(data.features).expanduser()
    try:
        if (path / "meta" / "info.json").is_file():
            features = dataset_features(json.loads((path / "meta" / "info.json").read_text()))
        elif path.is_file():
            features = features_of(EnvSpec.from_dict(json.loads(path.read_text())))
        else:
            raise ConfigError(f"data.features {path}: neither an env spec JSON file nor a LeRobot dataset")
    except KeyError as exc:
        raise ConfigError(f"data.features {path}: not an env spec or dataset (no {exc} key)") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"data.features {path}: not a readable env spec or dataset ({exc})") from None
    info = Path(data.record_dir) / "meta" / "info.json"
    if info.is_file():
        recorded = dataset_features(json.loads(info.read_text()))
        if recorded != features:
            differ = [key for key in features if features[key] != recorded.get(key)]
            raise ConfigError(
                f"data.features {path} does not match the dataset already at {data.record_dir} (differs in "
                f"{', '.join(differ)}); record to another data.record_dir"
            )
    return features


def is_saved_policy(path: str) -> bool:
    """A ``Policy.save`` folder (or an older single-file policy)."""
    return bool(path) and ((Path(path) / "policy.json").is_file() or Path(path).is_file())


def check_reward(reward: RewardSection) -> None:
    if reward.source not in REWARD_SOURCES:
        raise ConfigError(f"reward.source must be one of {REWARD_SOURCES}, got {reward.source!r}")
    if reward.source == "classifier" and not (Path(reward.classifier) / "classifier.json").is_file():
        raise ConfigError(
            f"reward.source=classifier needs reward.classifier, a trained classifier folder (a "
            f"reward_classifier run's classifier/); got {reward.classifier!r}"
        )
    if reward.consecutive_frames < 1 or not 0.0 <= reward.threshold < 1.0:
        raise ConfigError("reward.consecutive_frames must be >= 1 and reward.threshold in [0, 1)")


def check_dagger(config: ServeConfig) -> None:
    dagger = config.dagger
    output_dir = Path(dagger.output_dir or Path(config.log_dir) / "dagger")
    resumable = any(output_dir.glob("round_*/policy/policy.json"))
    if not resumable and not is_saved_policy(dagger.policy_path):
        raise ConfigError(
            f"server.mode=dagger needs dagger.policy_path, a saved policy (e.g. a BC run's "
            f"checkpoints/step_N/policy); got {dagger.policy_path!r}"
        )
    if dagger.rounds < 1 or dagger.episodes_per_round < 1 or dagger.updates_per_round < 1:
        raise ConfigError(
            "dagger.rounds, dagger.episodes_per_round and dagger.updates_per_round must be >= 1"
        )
    for root in dagger.datasets:
        if not (Path(root) / "meta" / "info.json").is_file():
            raise ConfigError(f"dagger.datasets: {root} is not a LeRobot v3 dataset (no meta/info.json)")


def training_config(config: ServeConfig):
    """The ``train`` section's training config; its run directory defaults to ``<log_dir>/train``."""
    from dataclasses import replace

    from trainer.configs.loader import load_config

    training = load_config(config.train.config, config.train.overrides)
    if not training.run.output_dir:
        training = replace(
            training, run=replace(training.run, output_dir=str(Path(config.log_dir) / "train"))
        )
    return training
