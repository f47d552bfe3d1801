"""The one base class for mistakes a user can fix: a bad path, key, value or file.

The command-line tools print such an error as one line (exit code 2); any other exception is a bug
and keeps its traceback. Subclasses keep their older base too (``ValueError`` mostly), so callers
that catch those still do.
"""

from __future__ import annotations


class UserError(Exception):
    """Something the user asked for cannot be done as asked; the message says what and how to fix it."""


__all__ = ["UserError"]
