"""Conversions between the wire messages of ``robot_link.proto`` and the numpy / dataclass side.

Needs protobuf and simplejpeg (the ``robot`` extra); the rest of ``protos`` needs numpy only.
Every decoder checks sizes against what was declared before it allocates, so a hostile or broken
peer gets a :class:`LinkCodecError` naming the field, never a huge allocation or a deep traceback.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
import simplejpeg

from protos import field_limits
from protos import robot_link_pb2 as pb
from protos.env_spec import (
    DEFAULT_REWARD_RANGE,
    LINK_DOWNSCALES,
    ActionSpace,
    CameraSpec,
    EnvSpec,
    StateField,
)

PROTOCOL_VERSION = 1
AGENT_VERSION = "0.1.0"
# Messages on the link stay under this; spooled episodes are uploaded in parts that fit.
MAX_MESSAGE_BYTES = field_limits.TRANSPORT_BYTES
MAX_IMAGE_PIXELS = 4096 * 4096
MAX_CHUNK_VALUES = 4096
# Bounds on what a registration may declare: checked before anything is built from it.
MAX_CAMERAS = 16
MAX_STATE_FIELDS = 64
MAX_STATE_DIM = 1024
MAX_ACTION_DIM = 64
MAX_NAME_CHARS = field_limits.MAX_ID_CHARS
MAX_INSTRUCTION_CHARS = field_limits.MAX_INSTRUCTION_CHARS
MAX_METADATA_ITEMS = 64
MAX_CONTROL_HZ = 1000.0
MAX_EPISODE_STEPS = 100_000
# A link probe (link.codec=auto) carries at most this much padding.
MAX_PROBE_BYTES = 2 * 1024 * 1024
# A JPEG may exceed its raw size on tiny or noisy images by its headers and tables.
JPEG_OVERHEAD_BYTES = 4096

# Trailing metadata of a refusal that may pass later (a session cap): seconds to wait before retrying.
RETRY_AFTER_KEY = "rlinf-retry-after-s"

CODECS = {"jpeg": pb.CODEC_JPEG, "raw": pb.CODEC_RAW_RGB8}


class LinkCodecError(ValueError):
    """A message on the link does not have the declared layout."""


# -- env spec ------------------------------------------------------------------------------------
def spec_to_proto(spec: EnvSpec) -> pb.EnvSpec:
    return pb.EnvSpec(
        name=spec.name,
        cameras=[
            pb.CameraSpec(
                name=c.name, height=c.height, width=c.width, fps=c.fps, max_downscale=c.max_downscale
            )
            for c in spec.cameras
        ],
        state_fields=[
            pb.StateField(name=f.name, size=f.size, low=f.low, high=f.high) for f in spec.state_fields
        ],
        action=pb.ActionSpace(
            kind=spec.action.kind,
            names=list(spec.action.names),
            low=list(spec.action.low),
            high=list(spec.action.high),
        ),
        control_hz=spec.control_hz,
        instruction=spec.instruction,
        max_episode_steps=spec.max_episode_steps,
        metadata={str(k): str(v) for k, v in spec.metadata.items()},
        reward_low=spec.reward_range[0],
        reward_high=spec.reward_range[1],
    )


def spec_from_proto(msg: pb.EnvSpec) -> EnvSpec:
    """Rebuild an :class:`EnvSpec`; a spec that breaks the contract or the bounds raises
    :class:`LinkCodecError`. Counts are checked before anything is built from them."""
    try:
        _check_spec_bounds(msg)
        return EnvSpec(
            name=msg.name,
            cameras=tuple(
                CameraSpec(c.name, c.height, c.width, float(c.fps), c.max_downscale or 1) for c in msg.cameras
            ),
            state_fields=tuple(
                StateField(
                    f.name,
                    f.size,
                    float(f.low) if f.HasField("low") else None,
                    float(f.high) if f.HasField("high") else None,
                )
                for f in msg.state_fields
            ),
            action=ActionSpace(
                kind=msg.action.kind,
                names=tuple(msg.action.names),
                low=tuple(float(x) for x in msg.action.low),
                high=tuple(float(x) for x in msg.action.high),
            ),
            control_hz=float(msg.control_hz),
            instruction=msg.instruction,
            max_episode_steps=int(msg.max_episode_steps),
            metadata=dict(msg.metadata),
            reward_range=(
                float(msg.reward_low) if msg.HasField("reward_low") else DEFAULT_REWARD_RANGE[0],
                float(msg.reward_high) if msg.HasField("reward_high") else DEFAULT_REWARD_RANGE[1],
            ),
        )
    except ValueError as exc:
        raise LinkCodecError(f"invalid env spec: {exc}") from None


def _check_spec_bounds(msg: pb.EnvSpec) -> None:
    def at_most(what: str, value: float, limit: float) -> None:
        if value > limit:
            raise ValueError(f"{what} is {value}, over the limit of {limit}")

    at_most("the number of cameras", len(msg.cameras), MAX_CAMERAS)
    at_most("the number of state fields", len(msg.state_fields), MAX_STATE_FIELDS)
    at_most("the number of action dims", len(msg.action.names), MAX_ACTION_DIM)
    at_most("the number of metadata items", len(msg.metadata), MAX_METADATA_ITEMS)
    at_most("the instruction length", len(msg.instruction), MAX_INSTRUCTION_CHARS)
    at_most("control_hz", msg.control_hz, MAX_CONTROL_HZ)  # NaN passes here and fails in EnvSpec
    at_most("max_episode_steps", msg.max_episode_steps, MAX_EPISODE_STEPS)
    at_most("the state dim", sum(f.size for f in msg.state_fields), MAX_STATE_DIM)
    names = [msg.name, *(c.name for c in msg.cameras), *(f.name for f in msg.state_fields), *msg.action.names]
    names += [*msg.metadata.keys(), *msg.metadata.values()]
    at_most("the longest name", max(len(n) for n in names), MAX_NAME_CHARS)
    for cam in msg.cameras:
        if cam.height * cam.width > MAX_IMAGE_PIXELS:
            raise ValueError(f"camera {cam.name!r} is {cam.height}x{cam.width}, over the size limit")
        at_most(f"camera {cam.name!r} fps", cam.fps, MAX_CONTROL_HZ)


def check_observation(obs: pb.Observation, spec: EnvSpec) -> None:
    """Check an observation against the spec without decoding it: the camera set, each frame's
    declared size and byte count, the state length, finite values, the step within the horizon.
    Raises :class:`LinkCodecError` naming the field."""
    names = sorted(f.camera for f in obs.frames)
    if names != sorted(spec.camera_names):
        raise LinkCodecError(
            f"observation {obs.seq}: cameras expected {sorted(spec.camera_names)}, got {names}"
        )
    for frame in obs.frames:
        cam = spec.camera(frame.camera)
        if (frame.height, frame.width) != (cam.height, cam.width):
            raise LinkCodecError(
                f"camera {cam.name!r} expected {cam.height}x{cam.width}, got {frame.height}x{frame.width}"
            )
        height, width = _sent_size(frame, cam)
        raw = height * width * 3
        if frame.codec == pb.CODEC_RAW_RGB8 and len(frame.data) != raw:
            raise LinkCodecError(
                f"camera {cam.name!r}: raw frame has {len(frame.data)} bytes, expected {raw}"
            )
        if frame.codec == pb.CODEC_JPEG and not 0 < len(frame.data) <= raw + JPEG_OVERHEAD_BYTES:
            raise LinkCodecError(f"camera {cam.name!r}: a {len(frame.data)}-byte JPEG for {height}x{width}")
        if frame.codec not in (pb.CODEC_RAW_RGB8, pb.CODEC_JPEG):
            raise LinkCodecError(f"camera {cam.name!r}: unknown codec {frame.codec}")
    if len(obs.state) != spec.state_dim:
        raise LinkCodecError(
            f"observation {obs.seq}: state has {len(obs.state)} values, expected {spec.state_dim}"
        )
    _check_finite("state", obs.state)
    _check_state_bounds(obs, spec)
    if obs.step > spec.max_episode_steps:
        raise LinkCodecError(
            f"observation {obs.seq}: step {obs.step} is past max_episode_steps {spec.max_episode_steps}"
        )
    if obs.HasField("transition"):
        t, dim = obs.transition, spec.action.dim
        for name, values, optional in (
            ("executed_action", t.executed_action, False),
            ("policy_action", t.policy_action, True),
            ("human_action", t.human_action, True),
        ):
            if len(values) != dim and not (optional and len(values) == 0):
                raise LinkCodecError(f"transition.{name} has {len(values)} values, expected {dim}")
            _check_finite(f"transition.{name}", values)
        _check_finite("transition.reward", [t.reward])
        low, high = spec.reward_range
        if not low <= t.reward <= high:
            raise LinkCodecError(
                f"observation {obs.seq}: transition.reward {t.reward:g} is outside the spec's reward_range [{low:g}, {high:g}]"
            )


def _check_state_bounds(obs: pb.Observation, spec: EnvSpec) -> None:
    state = np.asarray(obs.state, dtype=np.float32)
    low, high = spec.state_bounds
    outside = (state < low) | (state > high)
    if outside.any():
        i = int(outside.argmax())
        raise LinkCodecError(
            f"observation {obs.seq}: state[{i}] ({spec.state_names()[i]}) = {state[i]:g} is outside its "
            f"declared bounds [{low[i]:g}, {high[i]:g}]"
        )


def _check_finite(what: str, values) -> None:
    array = np.asarray(values, dtype=np.float32)
    if not np.isfinite(array).all():
        raise LinkCodecError(f"{what}[{int(np.argmin(np.isfinite(array)))}] is not finite")


# -- frames --------------------------------------------------------------------------------------
def shrink(image: np.ndarray, factor: int) -> np.ndarray:
    """``image`` at 1/``factor`` of each side: the mean of each ``factor x factor`` block (a box filter,
    so fine texture averages out rather than aliasing), rounded to nearest. Rows, then columns, are
    summed by adding strided slices: a ``sum`` over the axes of a 5-d view took 25 ms on a 480x640
    frame, more than the JPEG it saves; this takes 2 ms."""
    if factor == 1:
        return image
    height, width = image.shape[0] // factor, image.shape[1] // factor
    rows = image[: height * factor, : width * factor].reshape(height, factor, width * factor, 3)
    row_sums = rows[:, 0].astype(np.uint16)  # up to 64 * 255: fits
    for k in range(1, factor):
        row_sums += rows[:, k]
    columns = row_sums.reshape(height, width, factor, 3)
    total = columns[:, :, 0].copy()
    for k in range(1, factor):
        total += columns[:, :, k]
    total += factor * factor // 2
    total //= factor * factor
    return total.astype(np.uint8)


def enlarge(small: np.ndarray, factor: int, out: np.ndarray | None = None) -> np.ndarray:
    """``small`` at ``factor`` times each side, each pixel repeated (into ``out`` when given): the
    first of each ``factor`` rows is written by ``np.repeat``, then copied to the others."""
    height, width = small.shape[0] * factor, small.shape[1] * factor
    if out is None:
        out = np.empty((height, width, 3), np.uint8)
    rows = out.reshape(small.shape[0], factor, width, 3)
    rows[:, 0] = np.repeat(small, factor, axis=1)
    rows[:, 1:] = rows[:, :1]
    return out


def encode_frame(
    camera: str, image: np.ndarray, codec: str = "jpeg", quality: int = 90, downscale: int = 1
) -> pb.Frame:
    """Encode one RGB uint8 image (JPEG 4:2:0 by default, or raw bytes), sent at 1/``downscale`` of
    each side; the frame declares the full size, which the decoder restores."""
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {sorted(CODECS)}, got {codec!r}")
    if downscale not in LINK_DOWNSCALES:
        raise ValueError(f"downscale must be one of {LINK_DOWNSCALES}, got {downscale}")
    height, width = image.shape[:2]
    sent = np.ascontiguousarray(shrink(image, downscale))
    frame = pb.Frame(camera=camera, height=height, width=width, downscale=downscale if downscale > 1 else 0)
    if codec == "jpeg":
        frame.codec, frame.jpeg_quality = pb.CODEC_JPEG, quality
        frame.data = simplejpeg.encode_jpeg(sent, quality=quality, colorspace="RGB", colorsubsampling="420",
                                            fastdct=True)  # fmt: skip
    else:
        frame.codec, frame.data = pb.CODEC_RAW_RGB8, sent.tobytes()
    return frame


def _sent_size(frame: pb.Frame, expected: CameraSpec | None) -> tuple[int, int]:
    """The size of the frame's data: its declared size over its downscale, which must be one the
    camera allows (any of LINK_DOWNSCALES that divides the size, without a spec)."""
    height, width, factor = int(frame.height), int(frame.width), int(frame.downscale) or 1
    allowed = expected.max_downscale if expected is not None else max(LINK_DOWNSCALES)
    if factor not in LINK_DOWNSCALES or factor > allowed or height % factor or width % factor:
        raise LinkCodecError(
            f"camera {frame.camera!r}: downscale {factor} of {height}x{width} is not allowed (max_downscale {allowed})"
        )
    return height // factor, width // factor


# Protobuf keys (field number << 3 | wire type 2, length-delimited) of Observation.frames and Frame.data.
_FRAMES_KEY = bytes([pb.Observation.FRAMES_FIELD_NUMBER << 3 | 2])
_FRAME_DATA_KEY = bytes([pb.Frame.DATA_FIELD_NUMBER << 3 | 2])
_AGENT_OBSERVATION_KEY = bytes([pb.AgentMessage.OBSERVATION_FIELD_NUMBER << 3 | 2])


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def observation_parts(observation: pb.Observation, pixels: Mapping[str, object]) -> list:
    """The serialised ``observation`` with raw frames whose bytes are ``pixels[camera]`` (any buffer),
    as parts to join or write one after another. A frame whose camera is in ``pixels`` gives only its
    name, size and capture time; the others (JPEG) go as they are. Protobuf allows a message's fields
    in any order and a repeated field as separate records, so the pixels are never copied into a
    message (setting a 1 MB bytes field costs ten times the copy; parsing aliases the bytes it parses)."""
    head = pb.Observation()
    head.CopyFrom(observation)
    del head.frames[:]
    parts: list = [head.SerializeToString()]
    for frame in observation.frames:
        if frame.camera not in pixels:
            encoded = frame.SerializeToString()
            parts += [_FRAMES_KEY + _varint(len(encoded)), encoded]
            continue
        data = memoryview(pixels[frame.camera]).cast("B")  # bytes, however the buffer is shaped
        header = pb.Frame(
            camera=frame.camera, codec=pb.CODEC_RAW_RGB8, height=frame.height, width=frame.width,
            capture_mono_ns=frame.capture_mono_ns,
        ).SerializeToString() + _FRAME_DATA_KEY + _varint(len(data))  # fmt: skip
        parts += [_FRAMES_KEY + _varint(len(header) + len(data)), header, data]
    return parts


def observation_message_bytes(observation: pb.Observation, pixels: Mapping[str, object]) -> bytes:
    """A serialised ``AgentMessage`` carrying ``observation`` with the raw ``pixels`` of
    :func:`observation_parts`: the pixels are copied once, into the bytes the link sends (building
    the message instead costs about 1 ms per 640x480 frame, serialising it another copy)."""
    parts = observation_parts(observation, pixels)
    size = sum(len(part) for part in parts)
    return b"".join([_AGENT_OBSERVATION_KEY, _varint(size), *parts])


_AGENT_PROBE_KEY = bytes([pb.AgentMessage.PROBE_FIELD_NUMBER << 3 | 2])
_PROBE_PADDING_KEY = bytes([pb.LinkProbe.PADDING_FIELD_NUMBER << 3 | 2])
_PROBE_PADDING = memoryview(bytes(MAX_PROBE_BYTES))  # zeros, allocated once


def probe_message_bytes(probe_id: int, padding: int) -> bytes:
    """A serialised ``AgentMessage`` carrying ``LinkProbe(id, padding of that many bytes)``, put
    together as :func:`observation_message_bytes` puts raw frames: a large probe then costs what a
    raw observation of its size costs on the way (one copy), so the measured rate is the one raw
    frames get (setting the field in a message cost a 2 MB probe about 2 ms more)."""
    if not 0 <= padding <= MAX_PROBE_BYTES:
        raise ValueError(f"probe padding must be 0..{MAX_PROBE_BYTES} bytes, got {padding}")
    head = pb.LinkProbe(id=probe_id).SerializeToString()
    tail = [_PROBE_PADDING_KEY, _varint(padding), _PROBE_PADDING[:padding]] if padding else []
    size = len(head) + sum(len(part) for part in tail)
    return b"".join([_AGENT_PROBE_KEY, _varint(size), head, *tail])


def decode_frame(
    frame: pb.Frame, expected: CameraSpec | None = None, out: np.ndarray | None = None
) -> np.ndarray:
    """Decode a frame to ``uint8[H, W, 3]``, checking its declared and actual size first.

    ``out`` (a C-contiguous ``uint8[H, W, 3]``) is reused when given, which saves an allocation.
    """
    height, width = int(frame.height), int(frame.width)
    if expected is not None and (height, width) != (expected.height, expected.width):
        raise LinkCodecError(
            f"camera {frame.camera!r} expected {expected.height}x{expected.width}, got {height}x{width}"
        )
    if height * width == 0 or height * width > MAX_IMAGE_PIXELS:
        raise LinkCodecError(f"camera {frame.camera!r}: bad frame size {height}x{width}")
    sent_height, sent_width = _sent_size(frame, expected)
    factor = height // sent_height
    sent = _decode_data(frame, sent_height, sent_width, out if factor == 1 else None)
    if factor > 1:
        return enlarge(sent, factor, out)
    if out is not None and sent is not out:
        np.copyto(out, sent)
        return out
    return sent


def _decode_data(frame: pb.Frame, height: int, width: int, out: np.ndarray | None) -> np.ndarray:
    """The frame's data as ``uint8[height, width, 3]`` (a view of the bytes for raw frames)."""
    if frame.codec == pb.CODEC_RAW_RGB8:
        data = frame.data  # a copy on every read (upb): read a megabyte once
        if len(data) != height * width * 3:
            raise LinkCodecError(
                f"camera {frame.camera!r}: raw frame has {len(data)} bytes, expected {height * width * 3}"
            )
        return np.frombuffer(data, dtype=np.uint8).reshape(height, width, 3)
    if frame.codec == pb.CODEC_JPEG:
        try:
            h, w, _, _ = simplejpeg.decode_jpeg_header(frame.data)
        except (ValueError, RuntimeError) as exc:
            raise LinkCodecError(f"camera {frame.camera!r}: not a JPEG ({exc})") from None
        if (h, w) != (height, width):
            raise LinkCodecError(f"camera {frame.camera!r}: JPEG is {h}x{w}, declared {height}x{width}")
        try:
            return simplejpeg.decode_jpeg(
                frame.data, colorspace="RGB", fastdct=True, fastupsample=True, buffer=out
            )
        except (ValueError, RuntimeError) as exc:
            raise LinkCodecError(f"camera {frame.camera!r}: corrupt JPEG ({exc})") from None
    raise LinkCodecError(f"camera {frame.camera!r}: unknown codec {frame.codec}")


def check_cameras(frames, spec: EnvSpec) -> None:
    """An observation's frames must be exactly the spec's cameras."""
    names = sorted(f.camera for f in frames)
    if names != sorted(spec.camera_names):
        raise LinkCodecError(f"observation cameras expected {sorted(spec.camera_names)}, got {names}")


def decode_images(frames, spec: EnvSpec) -> dict[str, np.ndarray]:
    """Decode all frames of an observation; the camera set must equal the spec's."""
    check_cameras(frames, spec)
    return {f.camera: decode_frame(f, spec.camera(f.camera)) for f in frames}


# -- actions -------------------------------------------------------------------------------------
def chunk_to_proto(
    actions: np.ndarray, obs_seq: int, max_age_ms: int = 0, policy_version: int = 0
) -> pb.ActionChunk:
    actions = np.asarray(actions, dtype=np.float32)
    if actions.ndim == 1:
        actions = actions[None]
    return pb.ActionChunk(
        obs_seq=obs_seq,
        chunk_len=actions.shape[0],
        action_dim=actions.shape[1],
        values=actions.ravel().tolist(),
        max_age_ms=max_age_ms,
        policy_version=policy_version,
    )


def chunk_from_proto(msg: pb.ActionChunk) -> np.ndarray:
    """``float32[chunk_len, action_dim]``; the declared shape must match the values."""
    n, dim = int(msg.chunk_len), int(msg.action_dim)
    if n == 0 or dim == 0 or n * dim > MAX_CHUNK_VALUES:
        raise LinkCodecError(f"action chunk has a bad shape [{n}, {dim}]")
    if len(msg.values) != n * dim:
        raise LinkCodecError(f"action chunk declares [{n}, {dim}] but carries {len(msg.values)} values")
    return np.asarray(msg.values, dtype=np.float32).reshape(n, dim)


def floats(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def now_ns() -> tuple[int, int]:
    """(monotonic, wall) clock in nanoseconds."""
    return time.monotonic_ns(), time.time_ns()


def metadata_token(token: str) -> tuple[tuple[str, str], ...]:
    """gRPC call metadata that carries the shared token."""
    return (("authorization", f"Bearer {token}"),)


def token_from_metadata(metadata: Mapping[str, str] | None) -> str | None:
    value = (metadata or {}).get("authorization", "")
    return value[len("Bearer ") :] if value.startswith("Bearer ") else None
