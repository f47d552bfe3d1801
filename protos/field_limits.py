"""A size for every field a peer can send on the robot link, checked before anything is stored,
logged or decoded.

``LIMITS`` names every string, bytes, repeated and map field of ``robot_link.proto`` (a test checks
that none is missing): characters for a string, bytes for bytes, items for a repeated field or a
map, and ``(items, characters)`` for a repeated string. :func:`check_sizes` walks a parsed message
against it and raises :class:`FieldTooLarge` naming the first field over its limit. Bytes fields
whose limit is the transport's own (gRPC's receive limit) are not read here: reading a bytes field
copies it, and the frame checks compare each frame's bytes with its camera's size anyway.
"""

from __future__ import annotations

import re
from functools import cache

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from protos import robot_link_pb2 as pb

MAX_ROBOT_ID_CHARS = 64
MAX_ID_CHARS = 128  # episode ids, camera and field names
MAX_TEXT_CHARS = 512  # short free text: reasons, codec notes
MAX_INSTRUCTION_CHARS = 4096
MAX_VERSION_CHARS = 64
MAX_SAFETY_EVENTS = 32  # per transition
MAX_UNACKED_EPISODES = 10_000  # spooled episodes one registration may list
TRANSPORT_BYTES = 32 * 1024 * 1024  # the link's message limit (link_codec.MAX_MESSAGE_BYTES)
UPLOAD_PART_BYTES = 4 * 1024 * 1024  # the most an agent packs into one episode-upload part

_P = "rlinf.link.v1."
LIMITS: dict[str, int | tuple[int, int]] = {
    # the env spec (its finer bounds are in link_codec._check_spec_bounds)
    _P + "CameraSpec.name": MAX_ID_CHARS,
    _P + "StateField.name": MAX_ID_CHARS,
    _P + "ActionSpace.kind": MAX_VERSION_CHARS,
    _P + "ActionSpace.names": (64, MAX_ID_CHARS),
    _P + "ActionSpace.low": 64,
    _P + "ActionSpace.high": 64,
    _P + "EnvSpec.name": MAX_ID_CHARS,
    _P + "EnvSpec.cameras": 16,
    _P + "EnvSpec.state_fields": 64,
    _P + "EnvSpec.instruction": MAX_INSTRUCTION_CHARS,
    _P + "EnvSpec.metadata": 64,
    _P + "EnvSpec.MetadataEntry.key": MAX_ID_CHARS,
    _P + "EnvSpec.MetadataEntry.value": MAX_ID_CHARS,
    # agent -> trainer
    _P + "LinkProbe.padding": 2 * 1024 * 1024,
    _P + "Register.robot_id": MAX_ROBOT_ID_CHARS,
    _P + "Register.robot_kind": MAX_VERSION_CHARS,
    _P + "Register.agent_version": MAX_VERSION_CHARS,
    _P + "Register.unacked_episode_ids": (MAX_UNACKED_EPISODES, MAX_ID_CHARS),
    _P + "Register.resume_token": MAX_VERSION_CHARS,
    _P + "FrameRing.path": 256,
    _P + "DriverCapabilities.action_kinds": (16, MAX_VERSION_CHARS),
    _P + "Frame.camera": MAX_ID_CHARS,
    _P + "Frame.data": TRANSPORT_BYTES,  # exactly its camera's size: link_codec.check_observation
    _P + "Observation.episode_id": MAX_ID_CHARS,
    _P + "Observation.frames": 16,
    _P + "Observation.state": 1024,
    _P + "Observation.instruction": MAX_INSTRUCTION_CHARS,
    _P + "Observation.codec_reason": MAX_TEXT_CHARS,
    _P + "Transition.executed_action": 64,
    _P + "Transition.policy_action": 64,
    _P + "Transition.human_action": 64,
    _P + "Transition.safety_events": (MAX_SAFETY_EVENTS, MAX_ID_CHARS),
    _P + "EpisodeEvent.episode_id": MAX_ID_CHARS,
    _P + "EpisodeEvent.reason": MAX_TEXT_CHARS,
    _P + "EpisodeUpload.episode_id": MAX_ID_CHARS,
    _P + "EpisodeUpload.observations": 100_001,  # max_episode_steps + 1 at most, per the spec
    _P + "AgentError.code": MAX_VERSION_CHARS,
    _P + "AgentError.message": 1024,
    # trainer -> agent
    _P + "Welcome.session_id": MAX_VERSION_CHARS,
    _P + "Welcome.trainer_version": MAX_VERSION_CHARS,
    _P + "Welcome.resume_token": MAX_VERSION_CHARS,
    _P + "ActionChunk.values": 4096,
    _P + "Command.instruction": MAX_INSTRUCTION_CHARS,
    _P + "Command.episode_id": MAX_ID_CHARS,
    _P + "Command.reason": MAX_TEXT_CHARS,
    _P + "Ack.episode_id": MAX_ID_CHARS,
}

# A robot id: ASCII letters, digits and ``-_.``, starting with a letter or digit; unique regardless of case.
ROBOT_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class FieldTooLarge(ValueError):
    """A field of a message is over its limit in :data:`LIMITS`."""


def robot_id_problem(robot_id: str) -> str | None:
    """Why ``robot_id`` is not a valid robot id, or None."""
    if not 1 <= len(robot_id) <= MAX_ROBOT_ID_CHARS:
        return f"a robot id has 1..{MAX_ROBOT_ID_CHARS} characters, got {len(robot_id)}"
    if not ROBOT_ID_PATTERN.fullmatch(robot_id):
        return (
            f"robot id {robot_id!r} may use only ASCII letters, digits and '-', '_', '.' "
            "(starting with a letter or a digit)"
        )
    return None


def robot_id_key(robot_id: str) -> str:
    """What makes two robot ids the same robot: ids differ in more than case."""
    return robot_id.casefold()


def check_sizes(message, where: str = "") -> None:
    """Raise :class:`FieldTooLarge` for the first field of ``message`` (recursively) over its limit."""
    for name, _full_name, kind, limit, nested in _plan(message.DESCRIPTOR):
        path = f"{where}{name}"
        if kind == "message":
            if message.HasField(name):
                check_sizes(getattr(message, name), path + ".")
            continue
        value = getattr(message, name)
        items = len(value)
        if kind == "text" or kind == "bytes":
            if items > limit:
                unit = "characters" if kind == "text" else "bytes"
                raise FieldTooLarge(f"{path} has {items} {unit}, over the limit of {limit}")
            continue
        count = limit[0] if isinstance(limit, tuple) else limit
        if items > count:
            raise FieldTooLarge(f"{path} has {items} items, over the limit of {count}")
        if kind == "repeated_text":
            longest = max((len(v) for v in value), default=0)
            if longest > limit[1]:
                raise FieldTooLarge(
                    f"{path} has an item of {longest} characters, over the limit of {limit[1]}"
                )
        elif kind == "repeated_message":
            for i, item in enumerate(value):
                check_sizes(item, f"{path}[{i}].")
        elif kind == "map":
            key_limit, value_limit = (LIMITS[f"{nested.full_name}.{k}"] for k in ("key", "value"))
            for key, item in value.items():
                if len(key) > key_limit or len(item) > value_limit:
                    raise FieldTooLarge(
                        f"{path}[{key[:32]!r}] is over the limits of {key_limit} characters a key, "
                        f"{value_limit} a value"
                    )


@cache
def _plan(descriptor: Descriptor) -> tuple:
    """The fields of one message type that need a check: (name, full name, kind, limit, nested type)."""
    plan = []
    for field in descriptor.fields:
        repeated = field.is_repeated
        is_message = field.type == FieldDescriptor.TYPE_MESSAGE
        is_text = field.type == FieldDescriptor.TYPE_STRING
        is_bytes = field.type == FieldDescriptor.TYPE_BYTES
        if is_message and field.message_type.GetOptions().map_entry:
            plan.append((field.name, field.full_name, "map", LIMITS[field.full_name], field.message_type))
        elif is_message and not repeated:
            plan.append((field.name, field.full_name, "message", None, field.message_type))
        elif repeated:
            kind = "repeated_message" if is_message else "repeated_text" if is_text else "repeated"
            plan.append((field.name, field.full_name, kind, LIMITS[field.full_name], None))
        elif is_text:
            plan.append((field.name, field.full_name, "text", LIMITS[field.full_name], None))
        elif is_bytes and LIMITS[field.full_name] < TRANSPORT_BYTES:
            plan.append((field.name, field.full_name, "bytes", LIMITS[field.full_name], None))
    return tuple(plan)


def sized_fields() -> list[str]:
    """Every string, bytes, repeated and map field of the link's messages (what LIMITS must name)."""
    names = []
    for message in pb.DESCRIPTOR.message_types_by_name.values():
        names += _sized_fields_of(message)
    return names


def _sized_fields_of(descriptor: Descriptor) -> list[str]:
    names = []
    for field in descriptor.fields:
        if field.is_repeated or field.type in (
            FieldDescriptor.TYPE_STRING,
            FieldDescriptor.TYPE_BYTES,
        ):
            names.append(field.full_name)
    for nested in descriptor.nested_types:
        names += _sized_fields_of(nested)
    return names
