"""Output folders checked at start: a run that cannot write its outputs says so before it works."""

from __future__ import annotations

import os
from pathlib import Path

from trainer.configs.errors import ConfigError


def require_writable_dir(path: str | Path, key: str) -> None:
    """Raise a one-line :class:`ConfigError` naming ``key`` when the folder ``path`` cannot be created
    or written. Nothing is created: the nearest existing folder on the way must be writable."""
    target = Path(path).expanduser().absolute()
    existing = target
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{key}={path}: {existing} is not a folder, so {target} cannot be made")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "it is not" if existing == target else f"{existing}, on its way, is not"
        raise ConfigError(f"{key}={path}: {where} writable (pick a folder of yours)")


__all__ = ["require_writable_dir"]
