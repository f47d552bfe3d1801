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

from protos import robot_link_pb2 as pb
from protos.env_spec import ActionSpace, CameraSpec, EnvSpec, StateField

PROTOCOL_VERSION = 1
AGENT_VERSION = "0.1.0"
# Messages on the link stay under this; spooled episodes are uploaded in parts that fit.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
MAX_IMAGE_PIXELS = 4096 * 4096
MAX_CHUNK_VALUES = 4096

CODECS = {"jpeg": pb.CODEC_JPEG, "raw": pb.CODEC_RAW_RGB8}


class LinkCodecError(ValueError):
    """A message on the link does not have the declared layout."""


# -- env spec ------------------------------------------------------------------------------------
def spec_to_proto(spec: EnvSpec) -> pb.EnvSpec:
    return pb.EnvSpec(
        name=spec.name,
        cameras=[pb.CameraSpec(name=c.name, height=c.height, width=c.width, fps=c.fps) for c in spec.cameras],
        state_fields=[pb.StateField(name=f.name, size=f.size) for f in spec.state_fields],
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
    )


def spec_from_proto(msg: pb.EnvSpec) -> EnvSpec:
    """Rebuild an :class:`EnvSpec`; a spec that breaks the contract raises :class:`LinkCodecError`."""
    try:
        for cam in msg.cameras:
            if cam.height * cam.width > MAX_IMAGE_PIXELS:
                raise ValueError(f"camera {cam.name!r} is {cam.height}x{cam.width}, over the size limit")
        return EnvSpec(
            name=msg.name,
            cameras=tuple(CameraSpec(c.name, c.height, c.width, float(c.fps)) for c in msg.cameras),
            state_fields=tuple(StateField(f.name, f.size) for f in msg.state_fields),
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
        )
    except ValueError as exc:
        raise LinkCodecError(f"invalid env spec: {exc}") from None


# -- frames --------------------------------------------------------------------------------------
def encode_frame(camera: str, image: np.ndarray, codec: str = "jpeg", quality: int = 90) -> pb.Frame:
    """Encode one RGB uint8 image (JPEG 4:2:0 by default, or raw bytes)."""
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {sorted(CODECS)}, got {codec!r}")
    height, width = image.shape[:2]
    if codec == "jpeg":
        data = simplejpeg.encode_jpeg(
            np.ascontiguousarray(image),
            quality=quality,
            colorspace="RGB",
            colorsubsampling="420",
            fastdct=True,
        )
    else:
        data = np.ascontiguousarray(image).tobytes()
    return pb.Frame(camera=camera, codec=CODECS[codec], height=height, width=width, data=data)


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
    if frame.codec == pb.CODEC_RAW_RGB8:
        if len(frame.data) != height * width * 3:
            raise LinkCodecError(
                f"camera {frame.camera!r}: raw frame has {len(frame.data)} bytes, expected {height * width * 3}"
            )
        image = np.frombuffer(frame.data, dtype=np.uint8).reshape(height, width, 3)
        if out is not None:
            np.copyto(out, image)
            return out
        return image
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


def decode_images(frames, spec: EnvSpec) -> dict[str, np.ndarray]:
    """Decode all frames of an observation; the camera set must equal the spec's."""
    names = [f.camera for f in frames]
    if sorted(names) != sorted(spec.camera_names):
        raise LinkCodecError(f"observation cameras expected {sorted(spec.camera_names)}, got {sorted(names)}")
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
