"""Sizes of an agent's message read from its bytes, before the message is parsed.

The trainer takes each ``AgentMessage`` as bytes and parses it only once its size fits what its kind
may be: parsing an 8 MB instruction and reading it back cost the link's loop about 30 ms, and four
sessions sending them in a loop starved every other robot of its answers. An ``AgentMessage`` is
one ``oneof`` whose fields are length-delimited: a top-level record is a key, a length and the
body. Our agents send exactly one record; a message of more than ``MAX_RECORDS`` is refused unread.
"""

from __future__ import annotations

from protos import field_limits, link_codec
from protos import robot_link_pb2 as pb

MAX_RECORDS = 4
# Field number of each body of AgentMessage -> its name ("register", "observation", ...).
BODIES = {field.number: field.name for field in pb.AgentMessage.DESCRIPTOR.oneofs_by_name["body"].fields}
REGISTER_BYTES = 2 << 20  # a spec of the largest allowed shape and 10,000 spooled episode ids fit
SMALL_BYTES = 16 << 10  # an episode event or an agent error, with their text at its limits


class WireSizeError(ValueError):
    """A message's bytes do not fit its kind, or are not an AgentMessage at all."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise WireSizeError("a truncated or malformed message")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at


def body_sizes(data: bytes) -> dict[str, int]:
    """Bytes of each body kind in a serialised ``AgentMessage`` (normally one), without parsing it."""
    sizes: dict[str, int] = {}
    at, records = 0, 0
    while at < len(data):
        records += 1
        if records > MAX_RECORDS:
            raise WireSizeError(f"a message of more than {MAX_RECORDS} top-level fields")
        key, at = _varint(data, at)
        name = BODIES.get(key >> 3)
        if name is None or key & 7 != 2:
            raise WireSizeError(f"field {key >> 3} (wire type {key & 7}) is not part of an AgentMessage")
        length, at = _varint(data, at)
        at += length
        if at > len(data):
            raise WireSizeError("a truncated message")
        sizes[name] = sizes.get(name, 0) + length
    return sizes


def check_body_sizes(data: bytes, limits: dict[str, int]) -> str:
    """The message's kind (its last body, as protobuf reads a oneof), once each body fits ``limits``."""
    sizes = body_sizes(data)
    for name, size in sizes.items():
        if size > limits[name]:
            raise WireSizeError(
                f"{heaviest_field(data, pb.AgentMessage.DESCRIPTOR)}: the {name} message is {size} bytes, "
                f"over the limit of {limits[name]} for it"
            )
    return next(reversed(sizes)) if sizes else ""


MAX_RECORDS_WALKED = 10_000


def heaviest_field(data: bytes, descriptor, path: str = "") -> str:
    """The field that weighs most in ``data`` (a serialised ``descriptor``), down through nested
    messages, as "observation.instruction has 8388608 bytes" (read from the bytes, never parsed)."""
    weight: dict[int, int] = {}
    count: dict[int, int] = {}
    last: dict[int, tuple[int, int]] = {}
    at, walked = 0, 0
    while at < len(data) and walked < MAX_RECORDS_WALKED:
        walked += 1
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        start = at
        if wire == 2:
            length, at = _varint(data, at)
            start, at = at, at + length
        elif wire == 0:
            _, at = _varint(data, at)
        else:
            at += {1: 8, 5: 4}.get(wire, len(data))
        weight[number] = weight.get(number, 0) + at - start
        count[number] = count.get(number, 0) + 1
        last[number] = (start, at)
    if not weight:
        return path.rstrip(".") or "the message"
    number = max(weight, key=weight.__getitem__)
    field = descriptor.fields_by_number.get(number)
    if field is None:
        return f"{path}field {number} (unknown) has {weight[number]} bytes"
    name = path + field.name
    if field.message_type is not None and not field.is_repeated:
        start, end = last[number]
        return heaviest_field(memoryview(data)[start:end], field.message_type, name + ".")
    limit = field_limits.LIMITS.get(field.full_name)
    if field.is_repeated:
        items = f"more than {count[number]}" if walked >= MAX_RECORDS_WALKED else str(count[number])
        limit = limit[0] if isinstance(limit, tuple) else limit
        return f"{name} has {items} items" + (f", over the limit of {limit}" if limit is not None else "")
    over = f", over the limit of {limit}" if limit is not None and weight[number] > limit else ""
    return f"{name} has {weight[number]} bytes{over}"


def session_limits(observation_bytes: int, transport_bytes: int) -> dict[str, int]:
    """What each kind of message may weigh on a session whose largest observation is ``observation_bytes``."""
    return {
        "register": REGISTER_BYTES,
        "observation": observation_bytes + SMALL_BYTES,
        "episode_event": SMALL_BYTES,
        "episode_upload": transport_bytes,
        "error": SMALL_BYTES,
        "probe": link_codec.MAX_PROBE_BYTES + 64,
    }
