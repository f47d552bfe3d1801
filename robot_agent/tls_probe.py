"""Why a TLS link failed, when gRPC only says "Socket closed": one handshake with Python's ``ssl``.

gRPC reports a rejected client certificate, an expired one or a trainer certificate from another
CA as ``UNAVAILABLE`` (the same as a trainer that is down), so the agent would retry forever. This
probe repeats the handshake the way gRPC does it and names the TLS error, if there is one.
"""

from __future__ import annotations

import contextlib
import socket
import ssl

from robot_agent.config import LinkConfig


def tls_failure(config: LinkConfig, timeout_s: float = 2.0) -> str | None:
    """A one-line reason when TLS itself fails; None when it succeeds or the trainer is unreachable."""
    host, _, port = config.server.rpartition(":")
    host = host.strip("[]")
    context = ssl.create_default_context(cafile=config.tls_ca)
    if config.tls_cert and config.tls_key:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    context.set_alpn_protocols(["h2"])
    try:
        with (
            socket.create_connection((host, int(port)), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=config.tls_server_name or host) as tls,
        ):
            tls.settimeout(0.5)
            with contextlib.suppress(TimeoutError):
                # TLS 1.3: a refused client certificate shows after the handshake, as an alert or as
                # the trainer closing at once (a trainer that accepted us waits for HTTP/2 instead).
                if tls.recv(1) == b"":
                    return (
                        "the trainer closed the connection right after the TLS handshake: it did not accept "
                        "this agent's client certificate (expired, or not signed by its client CA?)"
                    )
    except ssl.SSLCertVerificationError as exc:
        return f"the trainer's certificate failed verification ({exc.verify_message}): check --tls-ca"
    except ssl.SSLError as exc:
        return f"the trainer refused the TLS handshake ({exc.reason}): check the client certificate and its dates"
    except OSError:
        return None  # not reachable (yet): an ordinary link loss
    return None


def speaks_tls(config: LinkConfig, timeout_s: float = 2.0) -> bool:
    """Whether the trainer at ``config.server`` answers a TLS handshake (certificates not checked):
    an agent that dials it without TLS only ever hears "Socket closed"."""
    host, _, port = config.server.rpartition(":")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with (
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=host.strip("[]")),
        ):
            return True
    except (OSError, ValueError):  # ssl.SSLError is an OSError: a plaintext server, or none
        return False
