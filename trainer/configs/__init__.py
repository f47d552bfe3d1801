"""Typed training configs (dataclasses + OmegaConf) and the named YAML presets beside this file."""

from trainer.configs.loader import ConfigError, load_config, save_config
from trainer.configs.schema import EnvConfig, RunConfig, TrainConfig

__all__ = ["ConfigError", "EnvConfig", "RunConfig", "TrainConfig", "load_config", "save_config"]
