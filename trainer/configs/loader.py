"""Load a named preset or a YAML file, apply ``key=value`` overrides, and check every key."""

from __future__ import annotations

from dataclasses import is_dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from protos.typed_config import check_known_keys
from trainer.configs.errors import ConfigError
from trainer.configs.schema import TrainConfig

PRESET_DIR = Path(__file__).resolve().parent
DEFAULT_PRESET = "ppo_pick_lift"


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def _resolve(name_or_path: str | None) -> Path:
    if name_or_path is None:
        return PRESET_DIR / f"{DEFAULT_PRESET}.yaml"
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.exists():
            raise ConfigError(f"config file {path} does not exist")
        return path
    preset = PRESET_DIR / f"{name_or_path}.yaml"
    if not preset.exists():
        raise ConfigError(
            f"unknown config {name_or_path!r}; presets: {preset_names()} (or pass a .yaml path)"
        )
    return preset


def _merge(base: Any, *others: Any) -> Any:
    try:
        return OmegaConf.merge(base, *others)
    except ConfigKeyError as exc:  # a key the schema does not have: the one message every config reader gives
        full_key = str(exc.full_key)
        prefix = full_key.rsplit(".", 1)[0] + "." if "." in full_key else ""
        if is_dataclass(exc.object_type):
            check_known_keys(exc.object_type, [exc.key], "the config", ConfigError, prefix)
        raise ConfigError(f"config key {exc.full_key!r}: {str(exc).splitlines()[0]}") from None
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        reason = str(exc).splitlines()[0]
        raise ConfigError(f"config key {key!r}: {reason}" if key else reason) from None


def load_config(name_or_path: str | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Preset (or file) + overrides -> a validated :class:`TrainConfig`."""
    config = load_structured(TrainConfig, _resolve(name_or_path), overrides)
    check_algorithm_keys(config)
    return config


def load_structured(schema_class: type, path: Path | None, overrides: list[str] | None = None) -> Any:
    """A typed dataclass config from an optional YAML file plus ``key=value`` overrides, every key checked."""
    merged = OmegaConf.structured(schema_class)
    if path is not None:
        try:
            loaded = OmegaConf.load(path)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
        merged = _merge(merged, loaded)
    if overrides:
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"override {item!r} must look like key=value (e.g. run.seed=1)")
        try:
            dotlist = OmegaConf.from_dotlist(list(overrides))
        except yaml.YAMLError as exc:
            raise ConfigError(f"an override's value is not valid YAML: {str(exc).splitlines()[0]}") from None
        merged = _merge(merged, dotlist)
    try:
        return OmegaConf.to_object(merged)
    except (OmegaConfBaseException, ValueError, TypeError) as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None


def algorithm_config(config: TrainConfig) -> Any:
    """The chosen algorithm's typed config, built from ``config.algo``."""
    from trainer.algorithms.registry import algorithm_class

    cls = algorithm_class(config.algorithm).config_class
    check_known_keys(cls, config.algo, f"the config (algorithm {config.algorithm!r})", ConfigError, "algo.")
    typed = _merge(OmegaConf.structured(cls), OmegaConf.create(dict(config.algo)))
    return OmegaConf.to_object(typed)


def check_algorithm_keys(config: TrainConfig) -> None:
    try:
        algorithm_config(config)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None


def save_config(config: TrainConfig, path: Path) -> None:
    path.write_text(OmegaConf.to_yaml(OmegaConf.structured(config)))


def to_plain(config: Any) -> Any:
    """Dataclass tree -> plain dict (for logging)."""
    if is_dataclass(config):
        return OmegaConf.to_container(OmegaConf.structured(config))
    return config
