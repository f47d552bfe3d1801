"""Trainer-side auth: TLS with a shared token by default, mutual TLS as an option, ``insecure`` only on request."""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from protos import link_codec
from protos.user_error import UserError

log = logging.getLogger(__name__)


class AuthConfigError(UserError, ValueError):
    """The server's auth settings are incomplete or point to missing files."""


@dataclass(frozen=True)
class ServerAuthConfig:
    """``token``: agents must send it. ``tls_cert``/``tls_key``: the server's identity.
    ``client_ca``: require client certificates signed by it (mutual TLS; a robot then registers as
    its certificate's common name). ``robot_tokens``: robot id -> a token of its own; such an id is
    bound to its token, and each token admits only its robot."""

    token: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    client_ca: str | None = None
    insecure: bool = False
    robot_tokens: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.insecure:
            return
        if not (self.tls_cert and self.tls_key):
            raise AuthConfigError(
                "the server needs TLS: set server.tls_cert and server.tls_key (and server.token_file), "
                "or pass --insecure on a trusted network"
            )
        if not (self.token or self.client_ca or self.robot_tokens):
            raise AuthConfigError(
                "set a token (server.token_file), per-robot tokens (server.robot_tokens_file) "
                "or a client CA for mutual TLS"
            )
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
        """The shared token or any robot's own token (which robot it admits is checked at registration)."""
        if self.token is None and not self.robot_tokens:
            return True
        if presented is None:
            return False
        known = [self.token] if self.token else []
        known += list(self.robot_tokens.values())
        return any(hmac.compare_digest(presented.encode(), k.encode()) for k in known)


class TokenGate(grpc.aio.ServerInterceptor):
    """Asks for the link's token on the side services too (health, reflection) when configured.

    The robot link checks its own token per stream; this covers the methods under ``prefixes``.
    """

    def __init__(self, auth: ServerAuthConfig, prefixes: tuple[str, ...]) -> None:
        self.auth, self.prefixes = auth, prefixes

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or not handler_call_details.method.startswith(self.prefixes):
            return handler
        metadata = dict(handler_call_details.invocation_metadata or ())
        if self.auth.token_ok(link_codec.token_from_metadata(metadata)):
            return handler

        async def refuse(_request, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "this service needs the link's token")

        kind = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(handler.request_streaming, handler.response_streaming)]
        return kind(refuse, handler.request_deserializer, handler.response_serializer)


def load_robot_tokens(path: str) -> dict[str, str]:
    """A JSON object ``{robot_id: token}``; one-line errors for a missing or malformed file."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise AuthConfigError(f"server.robot_tokens_file {file} does not exist")
    try:
        tokens = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise AuthConfigError(f"server.robot_tokens_file {file} is not JSON: {exc}") from None
    if not isinstance(tokens, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and len(v) >= 16 for k, v in tokens.items()
    ):
        raise AuthConfigError(
            f"server.robot_tokens_file {file} must be a JSON object of robot id -> token (16+ characters)"
        )
    if len(set(tokens.values())) != len(tokens):
        raise AuthConfigError(f"server.robot_tokens_file {file}: two robots share a token")
    return tokens
