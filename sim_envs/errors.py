"""The error for an env config key or value that cannot be used (the message names the key)."""

from __future__ import annotations

from protos.user_error import UserError


class EnvConfigError(UserError, ValueError):
    """An env's config (``env.kwargs``, a camera or physics file, a task name) that cannot be used."""


__all__ = ["EnvConfigError"]
