"""LeRobot's async-inference messages (``lerobot.async_inference``, lerobot 0.6.1), read without
executing a pickle and written without LeRobot installed.

LeRobot's robot client sends pickles: a ``RemotePolicyConfig`` (policy setup) and ``TimedObservation``
s (the robot's raw observation: ``{"<motor>.pos": float, "<camera>": uint8[h, w, 3], "task": str}``);
the server answers with a pickled ``list[TimedAction]`` whose actions are torch tensors.

Reading: :class:`SafeUnpickler` resolves only the two LeRobot record classes (to plain stand-ins),
numpy's array, dtype and scalar constructors (behind wrappers that check sizes and refuse object
dtypes), and nothing else; any other global (``os.system``, ``builtins.eval``, torch's rebuilders)
is refused by name, before it is looked up. What comes out is then checked field by field.

Writing: :func:`dump_timed_actions` writes the pickle opcodes for ``list[TimedAction]`` itself, each
action as ``torch.tensor([floats])`` (float32, LeRobot's action dtype), so the robot's own unpickler
builds LeRobot's real classes.
"""

from __future__ import annotations

import io
import math
import pickle
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from protos.user_error import UserError

HELPERS = "lerobot.async_inference.helpers"
MAX_TEXT_CHARS = 512  # policy type, checkpoint name, device, feature names
MAX_FEATURES = 64  # entries of lerobot_features, observation keys, rename_map
MAX_NAMES = 256  # names of one feature (the state's motor names)
MAX_CHUNK = 1000  # actions_per_chunk


class WireError(UserError):
    """A LeRobot message that cannot be read or does not fit: the reason names the field."""


class _Record:
    """What an allowed LeRobot record class unpickles into: its fields in ``__dict__``, nothing run."""


class _RemotePolicyConfig(_Record):
    pass


class _TimedObservation(_Record):
    pass


def _numeric(dtype: Any) -> np.dtype:
    if (
        not isinstance(dtype, np.dtype)
        or dtype.hasobject
        or dtype.fields is not None
        or dtype.kind not in "biuf"
    ):
        raise WireError(f"arrays must be of numbers, got dtype {dtype}")
    return dtype


def _make_dtype(spec: Any, align: Any = False, copy: Any = True) -> np.dtype:
    """A new dtype (never numpy's shared one: the pickle's BUILD may set its state next)."""
    if not isinstance(spec, str) or len(spec) > 8:
        raise WireError("an array's dtype must be a short type code")
    return _numeric(np.dtype(spec, align=bool(align), copy=True))


def _frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    dtype = _numeric(dtype)
    data = bytes(buffer) if isinstance(buffer, bytes | bytearray | memoryview | pickle.PickleBuffer) else None
    if data is None or not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise WireError("a malformed array")
    if math.prod(shape) * dtype.itemsize != len(data):
        raise WireError(f"an array of shape {shape} does not match its {len(data)} bytes")
    return np.frombuffer(data, dtype).reshape(shape, order="F" if order == "F" else "C").copy()


class _ArrayTypeName:
    """``numpy.ndarray`` as a pickle names it for ``_reconstruct``; calling it (which would allocate
    any shape the sender asks for) is refused."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise WireError("refused to build numpy.ndarray directly")


_NDARRAY = _ArrayTypeName()


def _reconstruct(subtype: Any, shape: Any, dtype_code: Any) -> np.ndarray:
    """An empty array that the pickle's BUILD fills (protocols < 5); numpy itself writes shape (0,),
    so nothing bigger is ever allocated here."""
    if subtype is not _NDARRAY or shape != (0,):
        raise WireError("a malformed array")
    return np.ndarray((0,), np.uint8)


def _scalar(dtype: Any, data: Any) -> Any:
    dtype = _numeric(dtype)
    if not isinstance(data, bytes) or len(data) != dtype.itemsize:
        raise WireError("a malformed number")
    return np.frombuffer(data, dtype)[0]


def _latin1(text: Any, encoding: Any = "latin1") -> bytes:
    """How protocol 2 writes bytes (it has no bytes opcode): ``_codecs.encode(text, "latin1")``."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise WireError("a malformed byte string")
    return text.encode("latin1")


_NUMPY_INTERNALS = (
    "numpy._core.multiarray",
    "numpy.core.multiarray",
    "numpy._core.numeric",
    "numpy.core.numeric",
)
ALLOWED: dict[tuple[str, str], Any] = {
    (HELPERS, "RemotePolicyConfig"): _RemotePolicyConfig,
    (HELPERS, "TimedObservation"): _TimedObservation,
    ("numpy", "ndarray"): _NDARRAY,
    ("_codecs", "encode"): _latin1,
    ("numpy", "dtype"): _make_dtype,
    **{(module, "_reconstruct"): _reconstruct for module in _NUMPY_INTERNALS},
    **{(module, "scalar"): _scalar for module in _NUMPY_INTERNALS},
    **{(module, "_frombuffer"): _frombuffer for module in _NUMPY_INTERNALS},
}


class SafeUnpickler(pickle.Unpickler):
    """Builds only what :data:`ALLOWED` names; anything else is refused before it is imported."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise WireError(
                f"refused to build {module[:80]}.{name[:80]}: not a LeRobot observation"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise WireError("refused a persistent reference")


def safe_loads(data: bytes) -> Any:
    try:
        return SafeUnpickler(io.BytesIO(data)).load()
    except WireError:
        raise
    except Exception as exc:  # truncated, malformed, a state numpy refuses
        raise WireError(f"not a readable LeRobot message ({type(exc).__name__})") from None


def _text(value: Any, field: str, limit: int = MAX_TEXT_CHARS) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise WireError(f"{field} must be text of at most {limit} characters")
    return value


def _fields(record: Any, cls: type, name: str) -> dict[str, Any]:
    if not isinstance(record, cls):
        raise WireError(f"expected a LeRobot {name}, got {type(record).__name__}")
    return vars(record)


@dataclass(frozen=True)
class PolicySetup:
    """What a robot's ``SendPolicyInstructions`` asks for (LeRobot's ``RemotePolicyConfig``)."""

    policy_type: str
    pretrained_name_or_path: str
    state_names: tuple[str, ...]  # the order of ``observation.state``: the robot's motor keys
    cameras: dict[str, tuple[int, ...]]  # the robot's camera name -> (height, width, 3)
    actions_per_chunk: int
    device: str


def load_policy_setup(data: bytes) -> PolicySetup:
    fields = _fields(safe_loads(data), _RemotePolicyConfig, "RemotePolicyConfig")
    features = fields.get("lerobot_features")
    if not isinstance(features, dict) or len(features) > MAX_FEATURES:
        raise WireError(f"lerobot_features must be a map of at most {MAX_FEATURES} features")
    state_names: tuple[str, ...] = ()
    cameras: dict[str, tuple[int, ...]] = {}
    for key, feature in features.items():
        key = _text(key, "a lerobot_features key")
        names = feature.get("names") if isinstance(feature, dict) else None
        shape = feature.get("shape") if isinstance(feature, dict) else None
        if (
            not isinstance(names, list | tuple)
            or len(names) > MAX_NAMES
            or not isinstance(shape, list | tuple)
        ):
            raise WireError(f"lerobot_features[{key!r}] must have names (at most {MAX_NAMES}) and a shape")
        if key == "observation.state":
            state_names = tuple(_text(n, "a state name") for n in names)
        elif key.startswith("observation.images."):
            if (
                len(shape) != 3
                or not all(isinstance(n, int) and 0 < n <= 8192 for n in shape)
                or shape[2] != 3
            ):
                raise WireError(
                    f"lerobot_features[{key!r}] must be an RGB image shape (h, w, 3), got {shape}"
                )
            cameras[key.removeprefix("observation.images.")] = tuple(shape)
    chunk = fields.get("actions_per_chunk")
    if not isinstance(chunk, int) or not 1 <= chunk <= MAX_CHUNK:
        raise WireError(f"actions_per_chunk must be 1 to {MAX_CHUNK}, got {chunk!r}"[:200])
    return PolicySetup(
        policy_type=_text(fields.get("policy_type"), "policy_type"),
        pretrained_name_or_path=_text(fields.get("pretrained_name_or_path"), "pretrained_name_or_path"),
        state_names=state_names,
        cameras=cameras,
        actions_per_chunk=chunk,
        device=_text(fields.get("device", "cpu"), "device"),
    )


@dataclass(frozen=True)
class TimedObservation:
    """One observation a robot sent: its raw values, when and at which step, and whether it must be
    answered (the robot's action queue ran empty)."""

    timestamp: float
    timestep: int
    observation: dict[str, Any]
    must_go: bool


def load_timed_observation(data: bytes) -> TimedObservation:
    fields = _fields(safe_loads(data), _TimedObservation, "TimedObservation")
    timestamp, timestep, raw = fields.get("timestamp"), fields.get("timestep"), fields.get("observation")
    if not isinstance(timestamp, float | int) or not math.isfinite(timestamp):
        raise WireError("timestamp must be a finite number")
    if not isinstance(timestep, int) or not 0 <= timestep < 2**62:
        raise WireError("timestep must be a step count")
    if not isinstance(raw, dict) or len(raw) > MAX_FEATURES:
        raise WireError(f"observation must be a map of at most {MAX_FEATURES} values")
    for key, value in raw.items():
        _text(key, "an observation key")
        if not isinstance(value, bool | int | float | str | np.ndarray | np.generic):
            raise WireError(f"observation[{key[:80]!r}] must be a number, text or an array")
        if isinstance(value, np.ndarray | np.generic):
            _numeric(value.dtype)  # a BUILD after the dtype's own check could have changed it
    return TimedObservation(float(timestamp), timestep, raw, bool(fields.get("must_go", False)))


# -- writing: list[TimedAction], as LeRobot's own pickle.loads reads it --------------------------


def _unicode(text: str) -> bytes:
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE


def _integer(value: int) -> bytes:
    if -(2**31) <= value < 2**31:
        return b"J" + struct.pack("<i", value)  # BININT
    data = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(data)]) + data  # LONG1


def dump_timed_actions(chunk: np.ndarray, first_timestamp: float, first_timestep: int, dt: float) -> bytes:
    """``[TimedAction(timestamp=t0 + i dt, timestep=i0 + i, action=torch.tensor(chunk[i]))]`` pickled."""
    out = [b"\x80\x02", b"]", b"("]  # PROTO 2, EMPTY_LIST, MARK
    for i, action in enumerate(np.asarray(chunk, np.float32)):
        out += [b"c" + HELPERS.encode() + b"\nTimedAction\n", b")", b"\x81", b"}", b"("]  # GLOBAL, NEWOBJ
        out += [_unicode("timestamp"), b"G" + struct.pack(">d", first_timestamp + i * dt)]  # BINFLOAT
        out += [_unicode("timestep"), _integer(first_timestep + i)]
        out += [_unicode("action"), b"ctorch\ntensor\n", b"]", b"("]  # torch.tensor([...])
        out += [b"G" + struct.pack(">d", float(value)) for value in action]
        out += [b"e", b"\x85", b"R"]  # APPENDS, TUPLE1, REDUCE
        out += [b"u", b"b"]  # SETITEMS, BUILD
    out += [b"e", b"."]  # APPENDS, STOP
    return b"".join(out)


__all__ = [
    "PolicySetup",
    "SafeUnpickler",
    "TimedObservation",
    "WireError",
    "dump_timed_actions",
    "load_policy_setup",
    "load_timed_observation",
    "safe_loads",
]
