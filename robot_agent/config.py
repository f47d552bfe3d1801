"""Agent configuration: typed frozen dataclasses, read from JSON / TOML files with named errors."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robot_agent.safety import SafetyConfig


class AgentConfigError(ValueError):
    """A robot config file or value is wrong; the message names the key."""


@dataclass(frozen=True)
class LinkConfig:
    """How the agent reaches the trainer and what it sends."""

    server: str = "127.0.0.1:50051"
    token: str | None = None
    tls_ca: str | None = None  # CA that signed the trainer's certificate; None with insecure
    tls_cert: str | None = None  # client certificate + key: mutual TLS
    tls_key: str | None = None
    tls_server_name: str | None = None  # override the name checked in the trainer's certificate
    insecure: bool = False
    codec: str = "jpeg"
    jpeg_quality: int = 90
    reconnect_initial_s: float = 0.2
    reconnect_max_s: float = 5.0
    max_outbox_observations: int = 8  # live observations waiting to be sent; older ones are skipped
    upload_part_bytes: int = 4 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.codec not in ("jpeg", "raw"):
            raise AgentConfigError(f"link.codec must be 'jpeg' or 'raw', got {self.codec!r}")
        if not 1 <= self.jpeg_quality <= 100:
            raise AgentConfigError(f"link.jpeg_quality must be in 1..100, got {self.jpeg_quality}")
        if not self.insecure and not self.tls_ca:
            raise AgentConfigError(
                "the link needs TLS: pass --tls-ca CA.pem (and --token-file), or --insecure for a trusted network"
            )
        if bool(self.tls_cert) != bool(self.tls_key):
            raise AgentConfigError("mutual TLS needs both link.tls_cert and link.tls_key")
        host, _, port = self.server.rpartition(":")
        if not host or not port.isdigit():
            raise AgentConfigError(f"--server must be HOST:PORT, got {self.server!r}")


@dataclass(frozen=True)
class AgentConfig:
    """Everything the agent needs besides the driver's own config."""

    robot_id: str = "robot-0"
    spool_dir: str = "~/.rlinf/spool"
    chunk_merge: str = "replace"  # or "blend": cross-fade a new chunk into the rest of the old one
    action_wait_fraction: float = 0.6  # how much of a tick to wait for its action before holding
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    link: LinkConfig = field(default_factory=lambda: LinkConfig(insecure=True))

    def __post_init__(self) -> None:
        if not 0.0 < self.action_wait_fraction < 1.0:
            raise AgentConfigError(f"action_wait_fraction must be in (0, 1), got {self.action_wait_fraction}")


def dataclass_from_dict(cls: type, data: dict[str, Any], where: str) -> Any:
    """Build the frozen dataclass ``cls`` from plain data; nested dataclasses and tuples are converted."""
    if not isinstance(data, dict):
        raise AgentConfigError(f"{where} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise AgentConfigError(f"unknown key {unknown[0]!r} in {where}; known: {sorted(known)}")
    values = {}
    for key, value in data.items():
        hint = hints[key]
        nested = _dataclass_in(hint)
        if nested is not None and isinstance(value, dict):
            value = dataclass_from_dict(nested, value, f"{where}.{key}")
        elif isinstance(value, list):
            value = tuple(value)
        values[key] = value
    try:
        return cls(**values)
    except AgentConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise AgentConfigError(f"{where}: {exc}") from None


def _dataclass_in(hint: Any) -> type | None:
    candidates = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return next((c for c in candidates if dataclasses.is_dataclass(c)), None)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a JSON or TOML robot config file into plain data."""
    path = Path(path)
    if not path.is_file():
        raise AgentConfigError(f"robot config {path} does not exist")
    text = path.read_text()
    try:
        if path.suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        return json.loads(text)
    except ValueError as exc:
        raise AgentConfigError(
            f"robot config {path} is not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}"
        ) from None
