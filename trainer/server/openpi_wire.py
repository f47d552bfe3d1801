"""openpi's wire format: msgpack with NumPy arrays as tagged maps, written here to the same bytes.

An array travels as ``{b"__ndarray__": True, b"data": raw bytes, b"dtype": dtype.str, b"shape": [...]}``
and a NumPy scalar as ``{b"__npgeneric__": True, b"data": value, b"dtype": dtype.str}`` (the keys are
msgpack bin, not str), as ``openpi_client.msgpack_numpy`` packs them. Decoding takes only numeric and
bool dtypes (never object arrays, never pickle), checks that the bytes match the shape, and bounds
every msgpack length before anything is allocated.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from protos.user_error import UserError

ARRAY_KEY, SCALAR_KEY = b"__ndarray__", b"__npgeneric__"
ALLOWED_KINDS = "biuf"  # bool, signed and unsigned ints, floats
MAX_DIMS = 8


class WireError(UserError, ValueError):
    """A message that is not openpi's msgpack-numpy, or holds what an observation may not."""


def _encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in ALLOWED_KINDS:
            raise WireError(f"cannot send an array of dtype {obj.dtype}")
        return {ARRAY_KEY: True, b"data": np.ascontiguousarray(obj).tobytes(), b"dtype": obj.dtype.str,
                b"shape": list(obj.shape)}  # fmt: skip
    if isinstance(obj, np.generic):
        return {SCALAR_KEY: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _decode(obj: dict) -> Any:
    if ARRAY_KEY in obj:
        dtype, shape, data = _dtype(obj.get(b"dtype")), obj.get(b"shape"), obj.get(b"data")
        if not (
            isinstance(shape, list | tuple)
            and len(shape) <= MAX_DIMS
            and all(isinstance(n, int) and n >= 0 for n in shape)
        ):
            raise WireError(f"an array's shape must be a list of at most {MAX_DIMS} sizes, got {shape!r}")
        if not isinstance(data, bytes) or len(data) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            raise WireError(
                f"an array of shape {list(shape)} and dtype {dtype} does not match its {len(data or b'')} bytes"
            )
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    if SCALAR_KEY in obj:
        return _dtype(obj.get(b"dtype")).type(obj.get(b"data"))
    return obj


def _dtype(name: Any) -> np.dtype:
    try:
        dtype = np.dtype(name)
    except TypeError:
        raise WireError(f"unknown array dtype {name!r}") from None
    if dtype.kind not in ALLOWED_KINDS:
        raise WireError(f"array dtype {dtype} is not taken (numbers and bools only)")
    return dtype


def pack(obj: Any) -> bytes:
    """``obj`` (dicts, lists, numbers, strings, arrays) as openpi's client and server pack it."""
    return msgpack.packb(obj, default=_encode)


def unpack(data: bytes, max_bytes: int) -> Any:
    """A message of at most ``max_bytes`` (the websocket refuses bigger frames before this)."""
    try:
        return msgpack.unpackb(
            data, object_hook=_decode, max_bin_len=max_bytes, max_str_len=max_bytes,
            max_array_len=4096, max_map_len=256, max_ext_len=0,
        )  # fmt: skip
    except WireError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise WireError(f"not an openpi msgpack message ({type(exc).__name__}: {str(exc)[:120]})") from None


__all__ = ["WireError", "pack", "unpack"]
