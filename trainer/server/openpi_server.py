"""openpi's policy protocol, served: robots that run openpi's ``WebsocketClientPolicy`` get actions
from a policy trained here without any change on the robot side.

The protocol, as openpi's ``WebsocketPolicyServer`` speaks it: on connect the server sends its
metadata (a msgpack map); then each binary message from the client is an observation dict and each
answer a dict with ``actions`` (``[chunk, action_dim]``) and ``server_timing``. An error is sent as a
text frame, which openpi's client raises as ``RuntimeError``, and the connection is closed. The
client sends its API key as the header ``Authorization: Api-Key <key>``; ``GET /healthz`` answers OK.

Such a robot has none of ``rlinf-robot``'s local safety (watchdog, workspace box, NaN checks) unless
its own client provides it: the server says so in its log once per connection.
"""

from __future__ import annotations

import asyncio
import http
import logging
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from protos.env_spec import EnvSpec
from protos.field_limits import MAX_INSTRUCTION_CHARS
from trainer.server import openpi_wire
from trainer.server.auth import ServerAuthConfig
from trainer.server.policy_driver import PolicyDriver

log = logging.getLogger(__name__)
MAX_KEYS = 64  # keys of one observation dict (openpi's clients send a few)
HEADROOM_BYTES = 64 * 1024  # per message, beyond the spec's pixels and state: keys, prompt, framing


@dataclass(frozen=True)
class OpenpiMapping:
    """Which keys of an openpi observation are our cameras, state and instruction."""

    images: dict[str, str]  # openpi key -> our camera name, e.g. {"observation/image": "front"}
    state: str = "observation/state"
    prompt: str = "prompt"


class ObservationError(openpi_wire.WireError):
    """An observation that does not fit the policy's spec."""


def max_message_bytes(spec: EnvSpec) -> int:
    """The largest observation this spec allows, raw, plus headroom: a bigger frame is refused unread."""
    pixels = sum(c.height * c.width * 3 for c in spec.cameras)
    return pixels + spec.state_dim * 8 + MAX_INSTRUCTION_CHARS * 4 + HEADROOM_BYTES


def to_observation(message: Any, spec: EnvSpec, mapping: OpenpiMapping) -> dict[str, Any]:
    """An openpi observation dict as ours (``images``, ``state``, ``instruction``), checked against ``spec``."""
    if not isinstance(message, dict):
        raise ObservationError(f"an observation is a map of keys to values, got {type(message).__name__}")
    if len(message) > MAX_KEYS:
        raise ObservationError(f"an observation has at most {MAX_KEYS} keys, got {len(message)}")
    missing = [k for k in (*mapping.images, mapping.state) if k not in message]
    if missing:
        raise ObservationError(f"the observation lacks {missing}; it has {sorted(map(str, message))[:20]}")
    images = {}
    for key, camera in mapping.images.items():
        image = message[key]
        shape = spec.camera(camera).shape
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.shape != shape:
            got = (
                f"{image.dtype}{list(image.shape)}" if isinstance(image, np.ndarray) else type(image).__name__
            )
            raise ObservationError(f"{key!r} must be uint8{list(shape)} (camera {camera!r}), got {got}")
        images[camera] = np.array(image)
    try:
        state = (
            np.asarray(message[mapping.state], np.float32)
            if isinstance(message[mapping.state], np.ndarray | list)
            else None
        )
    except (TypeError, ValueError):  # a list of text, nested lists of uneven length
        state = None
    if state is None or state.shape != (spec.state_dim,) or not np.isfinite(state).all():
        raise ObservationError(f"{mapping.state!r} must be {spec.state_dim} finite numbers")
    prompt = message.get(mapping.prompt, spec.instruction)
    if not isinstance(prompt, str) or len(prompt) > MAX_INSTRUCTION_CHARS:
        raise ObservationError(
            f"{mapping.prompt!r} must be text of at most {MAX_INSTRUCTION_CHARS} characters"
        )
    return {"images": images, "state": state, "instruction": prompt or spec.instruction}


class OpenpiPolicyServer:
    """Answers openpi websocket clients with ``driver``'s policy (greedy or sampled as it is set)."""

    def __init__(
        self,
        driver: PolicyDriver,
        mapping: OpenpiMapping,
        auth: ServerAuthConfig,
        host: str,
        port: int,
        max_connections: int = 64,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.driver, self.mapping, self.auth = driver, mapping, auth
        self.host, self.port, self.max_connections = host, port, max_connections
        spec = driver.policy.spec
        if set(mapping.images.values()) != set(driver.policy.cameras):
            raise openpi_wire.WireError(
                f"openpi.images must map an openpi key to each camera the policy reads "
                f"{list(driver.policy.cameras)}, got {mapping.images}"
            )
        self.metadata = {"server": "rlinf", "action_dim": spec.action.dim, "action_names": list(spec.action.names),
                         "state_dim": spec.state_dim, **(metadata or {})}  # fmt: skip
        self.connections = 0
        self.answered = 0
        self.bound_port = 0

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.auth.insecure:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(
            str(Path(self.auth.tls_cert).expanduser()), str(Path(self.auth.tls_key).expanduser())
        )
        return context

    def _process_request(self, connection, request):
        """Before the websocket opens: ``/healthz``, the API key, the connection cap."""
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        header = request.headers.get("Authorization", "")
        key = header[len("Api-Key ") :] if header.startswith("Api-Key ") else None
        if not self.auth.insecure and not (key is not None and self.auth.token_ok(key)):
            return connection.respond(
                http.HTTPStatus.UNAUTHORIZED, "a valid 'Authorization: Api-Key <token>' is needed\n"
            )
        if self.connections >= self.max_connections:
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "too many connections\n")
        return None

    async def _handle(self, websocket) -> None:
        import websockets

        self.connections += 1
        peer = websocket.remote_address
        log.warning(
            "openpi client %s connected: it has none of rlinf-robot's local safety (watchdog, workspace box, "
            "NaN checks) unless its own client provides it", peer,
        )  # fmt: skip
        limit = max_message_bytes(self.driver.policy.spec)
        try:
            await websocket.send(openpi_wire.pack(self.metadata))
            async for message in websocket:
                started = time.monotonic()
                try:
                    if isinstance(message, str):
                        raise ObservationError("observations are binary msgpack frames, not text")
                    obs = to_observation(
                        openpi_wire.unpack(message, limit), self.driver.policy.spec, self.mapping
                    )
                except openpi_wire.WireError as exc:
                    log.warning("openpi client %s: %s", peer, exc)
                    await websocket.send(f"rlinf: {exc}")  # openpi's client raises it as RuntimeError
                    await websocket.close(code=1008, reason="bad observation")
                    return
                actions = await self.driver.act_async(obs)
                infer_ms = (time.monotonic() - started) * 1000
                await websocket.send(openpi_wire.pack({
                    "actions": actions.astype(np.float32),
                    "policy_version": self.driver.version,
                    "server_timing": {"infer_ms": infer_ms},
                }))  # fmt: skip
                self.answered += 1
        except websockets.ConnectionClosed:
            pass
        finally:
            self.connections -= 1
            log.info("openpi client %s left", peer)

    async def run(self, stop: asyncio.Event, started: asyncio.Event | None = None) -> None:
        """Serve until ``stop`` is set; ``started`` is set once the port is bound (``bound_port``)."""
        from websockets.asyncio.server import serve

        server = await serve(
            self._handle, self.host, self.port, ssl=self.ssl_context(), compression=None,
            max_size=max_message_bytes(self.driver.policy.spec), process_request=self._process_request,
        )  # fmt: skip
        self.bound_port = next(iter(server.sockets)).getsockname()[1]
        log.info("answering openpi clients on %s:%d (%s)", self.host, self.bound_port,
                 "ws, no auth" if self.auth.insecure else "wss + Api-Key")  # fmt: skip
        if started is not None:
            started.set()
        try:
            await stop.wait()
        finally:
            server.close()
            await server.wait_closed()


__all__ = ["ObservationError", "OpenpiMapping", "OpenpiPolicyServer", "max_message_bytes", "to_observation"]
