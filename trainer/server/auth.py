"""Trainer-side auth: TLS with a shared token by default, mutual TLS as an option, ``insecure`` only on request."""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from pathlib import Path

import grpc

log = logging.getLogger(__name__)


class AuthConfigError(ValueError):
    """The server's auth settings are incomplete or point to missing files."""


@dataclass(frozen=True)
class ServerAuthConfig:
    """``token``: agents must send it. ``tls_cert``/``tls_key``: the server's identity.
    ``client_ca``: require client certificates signed by it (mutual TLS)."""

    token: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    client_ca: str | None = None
    insecure: bool = False

    def __post_init__(self) -> None:
        if self.insecure:
            return
        if not (self.tls_cert and self.tls_key):
            raise AuthConfigError(
                "the server needs TLS: set server.tls_cert and server.tls_key (and server.token_file), "
                "or pass --insecure on a trusted network"
            )
        if not (self.token or self.client_ca):
            raise AuthConfigError("set a token (server.token_file) or a client CA for mutual TLS")
        for name in ("tls_cert", "tls_key", "client_ca"):
            path = getattr(self, name)
            if path and not Path(path).expanduser().is_file():
                raise AuthConfigError(f"server.{name} {path} does not exist")

    def credentials(self) -> grpc.ServerCredentials | None:
        """Server credentials, or None for an insecure port."""
        if self.insecure:
            log.warning(
                "serving WITHOUT TLS or auth (--insecure): any host that reaches this port can drive robots"
            )
            return None
        read = lambda p: Path(p).expanduser().read_bytes()  # noqa: E731
        return grpc.ssl_server_credentials(
            [(read(self.tls_key), read(self.tls_cert))],
            root_certificates=read(self.client_ca) if self.client_ca else None,
            require_client_auth=bool(self.client_ca),
        )

    def token_ok(self, presented: str | None) -> bool:
        if self.token is None:
            return True
        return presented is not None and hmac.compare_digest(presented.encode(), self.token.encode())
