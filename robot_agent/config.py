"""Agent configuration: typed frozen dataclasses, read from JSON / TOML files with named errors."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protos import typed_config
from protos.env_spec import LINK_DOWNSCALES
from protos.field_limits import UPLOAD_PART_BYTES, robot_id_problem
from protos.user_error import UserError
from robot_agent.safety import SafetyConfig


class AgentConfigError(UserError, ValueError):
    """A robot config file or value is wrong; the message names the key."""


@dataclass(frozen=True)
class LinkConfig:
    """How the agent reaches the trainer and what it sends."""

    server: str = "127.0.0.1:50051"  # HOST:PORT of the trainer (--server)
    token: str | None = None  # the shared token (--token-file reads it from a file)
    tls_ca: str | None = None  # CA that signed the trainer's certificate; None with insecure
    tls_cert: str | None = None  # client certificate + key: mutual TLS
    tls_key: str | None = None  # the client certificate's key
    tls_server_name: str | None = None  # override the name checked in the trainer's certificate
    insecure: bool = False  # no TLS, no token (--insecure)
    # "auto": measure the link and pick raw or a JPEG quality per camera (robot_agent/codec_choice.py);
    # "jpeg" / "raw": always that. jpeg_quality is the top quality; auto goes down to min_jpeg_quality.
    codec: str = "auto"
    jpeg_quality: int = 90  # the top JPEG quality
    min_jpeg_quality: int = 50  # the lowest JPEG quality auto may choose
    # auto may also send frames at 1/2, 1/4 or 1/8 of each side (after min_jpeg_quality, on links too
    # slow for it); the registered spec declares it per camera and the trainer restores the size. 1: never.
    max_downscale: int = 1
    max_link_share: float = 0.5  # auto keeps an observation's link time under this share of the period
    probe_interval_s: float = 2.0  # auto measures the link this often while running (a probe pair)
    reconnect_initial_s: float = 0.2  # first wait before reconnecting (doubles, jittered)
    reconnect_max_s: float = 5.0  # longest wait between reconnects
    max_outbox_observations: int = 8  # live observations waiting to be sent; older ones are skipped
    upload_part_bytes: int = UPLOAD_PART_BYTES  # a spooled episode is uploaded in parts of about this size
    # Raw frames to a trainer on this host go by shared memory (protos/frame_ring.py), in a ring of
    # this many slots (at 30 Hz, 16 slots give the trainer half a second); 0 sends them in-band.
    frame_ring_slots: int = 16

    def __post_init__(self) -> None:
        if self.codec not in ("auto", "jpeg", "raw"):
            raise AgentConfigError(f"link.codec must be 'auto', 'jpeg' or 'raw', got {self.codec!r}")
        if not 1 <= self.min_jpeg_quality <= 100:
            raise AgentConfigError(f"link.min_jpeg_quality must be in 1..100, got {self.min_jpeg_quality}")
        if self.max_downscale not in LINK_DOWNSCALES:
            raise AgentConfigError(
                f"link.max_downscale must be one of {LINK_DOWNSCALES}, got {self.max_downscale}"
            )
        if not self.probe_interval_s > 0:
            raise AgentConfigError(f"link.probe_interval_s must be > 0, got {self.probe_interval_s}")
        if not 0.0 < self.max_link_share <= 1.0:
            raise AgentConfigError(f"link.max_link_share must be in (0, 1], got {self.max_link_share}")
        if self.frame_ring_slots != 0 and self.frame_ring_slots < 2:
            raise AgentConfigError(
                f"link.frame_ring_slots must be 0 (off) or >= 2, got {self.frame_ring_slots}"
            )
        if not 64 * 1024 <= self.upload_part_bytes <= UPLOAD_PART_BYTES:
            raise AgentConfigError(  # a trainer that knows its run's schema receives no bigger part
                f"link.upload_part_bytes must be 64 KiB to {UPLOAD_PART_BYTES >> 20} MiB, got {self.upload_part_bytes}"
            )
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

    robot_id: str = "robot-0"  # this robot's id on the trainer; the CLI's default is <host name>-<robot kind>
    spool_dir: str = "~/.rlinf/spool"  # episodes wait here (a folder per trainer address) until the trainer acknowledges them
    chunk_merge: str = "replace"  # or "blend": cross-fade a new chunk into the rest of the old one
    action_wait_fraction: float = 0.6  # how much of a tick to wait for its action before holding
    # Hold the host's cores out of idle states while running (PM QoS; needs root or a udev rule):
    # ~1.6 ms off a 30 Hz round trip where waking halted cores is slow (robot_agent/core_wake.py).
    keep_cores_awake: bool = True
    # One SCHED_IDLE busy loop per core while running: cores never halt, also in a VM, where the PM
    # QoS request is not enough (~2 ms off a 30 Hz round trip there). Costs power, not time.
    spin_idle_cores: bool = False
    # The state sent ends with the action last chosen, by the policy or the human (before the safety
    # filter; zeros before an episode's first), as a sim with ``env.kwargs.previous_action_in_state``
    # shows it: with control latency the last command is still in force for part of each step. Not
    # the filtered action: the sim's own limits are no exact copy of the filter, and a camera policy
    # cloned in the sim lost 0.80 of its success on a gap-free twin when the two differed.
    previous_action_in_state: bool = False
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    link: LinkConfig = field(default_factory=lambda: LinkConfig(insecure=True))

    def __post_init__(self) -> None:
        problem = robot_id_problem(self.robot_id)
        if problem is not None:
            raise AgentConfigError(f"--robot-id: {problem}")
        if not 0.0 < self.action_wait_fraction < 1.0:
            raise AgentConfigError(f"action_wait_fraction must be in (0, 1), got {self.action_wait_fraction}")


def _toml_module():
    """The stdlib's ``tomllib`` (3.11+), else ``tomli`` (installed with the robot extra on 3.10)."""
    try:
        import tomllib
    except ImportError:
        try:
            import tomli as tomllib
        except ImportError:
            raise AgentConfigError(
                "TOML robot configs on Python 3.10 need tomli: pip install tomli"
            ) from None
    return tomllib


def dataclass_from_dict(cls: type, data: dict[str, Any], where: str) -> Any:
    """Build the frozen dataclass ``cls`` from plain data (``protos.typed_config``), errors as
    :class:`AgentConfigError`."""
    return typed_config.dataclass_from_dict(cls, data, where, AgentConfigError)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a JSON or TOML robot config file into plain data."""
    path = Path(path)
    if not path.is_file():
        raise AgentConfigError(f"robot config {path} does not exist")
    text = path.read_text()
    try:
        if path.suffix == ".toml":
            return _toml_module().loads(text)
        return json.loads(text)
    except ValueError as exc:
        raise AgentConfigError(
            f"robot config {path} is not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}"
        ) from None
