"""The ``rlinf-trainer serve`` config: typed sections, every key checked, ``key=value`` overrides."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trainer.configs.loader import ConfigError, load_structured

MODES = ("collect", "eval", "train")
COLLECT_POLICIES = ("random", "hold")


@dataclass
class ServerSection:
    """Where the robot link listens and how agents authenticate."""

    host: str = "0.0.0.0"
    port: int = 50051
    mode: str = "collect"
    token_file: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    client_ca: str = ""  # set: mutual TLS
    insecure: bool = False


@dataclass
class DataSection:
    """Where episodes are recorded (a LeRobot v3 dataset)."""

    record_dir: str = "runs/dataset"
    video_codec: str = "libx264"


@dataclass
class CollectSection:
    """What drives the robots in ``collect`` mode (teleop and loaded policies come later)."""

    policy: str = "random"
    action_scale: float = 0.3  # random actions are uniform in [-scale, scale]
    episodes_per_robot: int = 0  # 0: until the server stops
    seed: int = 0


@dataclass
class EvalSection:
    """A fixed policy (saved with ``Policy.save``) run on every robot, with success statistics."""

    policy_path: str = ""
    episodes_per_robot: int = 10
    greedy: bool = True
    results_file: str = ""  # default: <log_dir>/eval.json


@dataclass
class ServeConfig:
    server: ServerSection = field(default_factory=ServerSection)
    data: DataSection = field(default_factory=DataSection)
    collect: CollectSection = field(default_factory=CollectSection)
    eval: EvalSection = field(default_factory=EvalSection)
    log_dir: str = "runs/serve"  # TensorBoard figures per robot


def load_serve_config(path: str | None, overrides: list[str] | None = None) -> ServeConfig:
    if path is not None and not Path(path).exists():
        raise ConfigError(f"config file {path} does not exist")
    config = load_structured(ServeConfig, Path(path) if path else None, overrides)
    if config.server.mode not in MODES:
        raise ConfigError(f"server.mode must be one of {MODES}, got {config.server.mode!r}")
    if config.server.mode == "train":
        raise ConfigError("server.mode=train is not wired to the algorithms yet; use collect or eval")
    if config.server.mode == "eval" and not Path(config.eval.policy_path).is_file():
        raise ConfigError(
            f"server.mode=eval needs eval.policy_path, a saved policy file; got {config.eval.policy_path!r}"
        )
    if config.collect.policy not in COLLECT_POLICIES:
        raise ConfigError(f"collect.policy must be one of {COLLECT_POLICIES}, got {config.collect.policy!r}")
    if not config.data.record_dir:
        raise ConfigError("data.record_dir must name the dataset folder")
    return config
