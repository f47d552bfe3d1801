"""One way to read a config: plain data (JSON, TOML, YAML, keyword overrides) into a frozen, typed
dataclass, every key checked and every mistake one line that names it.

The trainer's YAML goes through OmegaConf (its structured configs check the same keys); the agent's
config files, saved policies, env kwargs, randomisation and physics files come through here.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any

from protos.user_error import UserError


class ConfigValueError(UserError, ValueError):
    """A config key or value that cannot be used; the message names it."""


def check_known_keys(
    cls: type,
    data: typing.Iterable[str],
    where: str,
    error: type[Exception] = ConfigValueError,
    prefix: str = "",
) -> None:
    """Refuse a key that is not a field of ``cls``: ``unknown key 'k' in WHERE; known: [...]``, with
    the nearest known key where one is close (a typo). ``prefix`` shows the key's dotted path
    (``run.`` for the trainer's ``run.totl_env_steps``)."""
    known = sorted(f.name for f in dataclasses.fields(cls))
    unknown = sorted(set(data) - set(known))
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise error(f"unknown key {prefix + unknown[0]!r} in {where}; known: {known}{hint}")


def type_mismatch(value: Any, hint: Any) -> bool:
    """Whether ``value`` (plain config data) cannot be the field type ``hint``. Unknown types pass."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return all(type_mismatch(value, option) for option in args)
    if hint is type(None):
        return value is not None
    if hint is bool:
        return not isinstance(value, bool)
    if hint is int:
        return isinstance(value, bool) or not isinstance(value, int)
    if hint is float:
        return isinstance(value, bool) or not isinstance(value, (int, float))
    if hint is str:
        return not isinstance(value, str)
    if origin in (tuple, list):
        if not isinstance(value, (tuple, list)):
            return True
        if origin is list or (len(args) == 2 and args[1] is Ellipsis):
            return bool(args) and any(type_mismatch(item, args[0]) for item in value)
        return len(args) != len(value) or any(type_mismatch(v, a) for v, a in zip(value, args))
    if hint is dict or origin is dict:
        return not isinstance(value, dict)
    if dataclasses.is_dataclass(hint):
        return not isinstance(value, (dict, hint))
    return False


def type_name(hint: Any) -> str:
    if typing.get_origin(hint) is None and hasattr(hint, "__name__"):
        return hint.__name__
    return str(hint).replace("typing.", "")


def dataclass_from_dict(cls: type, data: Any, where: str, error: type[Exception] = ConfigValueError) -> Any:
    """Build the dataclass ``cls`` from plain data: unknown keys and wrong types are named, nested
    dataclasses are built from their dicts, lists become tuples where the field is a tuple, and a
    value the class itself refuses (``__post_init__``) is reported as ``WHERE: reason``."""
    if not isinstance(data, dict):
        raise error(f"{where} must be a mapping, got {type(data).__name__}")
    check_known_keys(cls, data, where, error)
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in data.items():
        hint = hints[key]
        if type_mismatch(value, hint):
            raise error(f"{where}.{key} must be {type_name(hint)}, got {value!r} ({type(value).__name__})")
        nested = _dataclass_in(hint)
        if nested is not None and isinstance(value, dict):
            value = dataclass_from_dict(nested, value, f"{where}.{key}", error)
        elif isinstance(value, list) and _wants_tuple(hint):
            value = tuple(value)
        values[key] = value
    try:
        return cls(**values)
    except error:
        raise
    except (TypeError, ValueError) as exc:
        raise error(f"{where}: {exc}") from None


def _dataclass_in(hint: Any) -> type | None:
    candidates = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return next((c for c in candidates if dataclasses.is_dataclass(c)), None)


def _wants_tuple(hint: Any) -> bool:
    candidates = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return any(c is tuple or typing.get_origin(c) is tuple for c in candidates)
