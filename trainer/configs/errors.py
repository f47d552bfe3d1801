"""The one error type for unusable configs (its own module: the loader and what it loads both raise it)."""

from protos.user_error import UserError


class ConfigError(UserError, ValueError):
    """A config that cannot be used; the message names the key."""


__all__ = ["ConfigError"]
