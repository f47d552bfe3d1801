"""The error for a saved policy that cannot be loaded as asked (the message names the folder)."""

from __future__ import annotations

from protos.user_error import UserError


class PolicyLoadError(UserError, ValueError):
    """A folder that is not a saved policy, or holds one that does not fit the env or config."""


__all__ = ["PolicyLoadError"]
