"""Raw camera frames by shared memory, for an agent and a trainer on the same host.

gRPC costs milliseconds per megabyte of frame (serialisation, HTTP/2 framing, copies on both sides);
a small message costs a quarter of a millisecond. When the trainer is on this host, the agent writes
raw frames into a ring of slots in a file under ``/dev/shm`` (created ``0600``, so only the same user
can read it) and sends only where they are (``CODEC_RING``: a slot and an offset). The trainer maps
the file read-only and copies each frame out as it arrives, so everything after it sees ordinary raw
frames.

Slot layout: an 8-byte header, the ``seq`` of the observation whose frames the slot holds (-1 while
the agent writes it), then the frames. The trainer checks the header before and after its copy: a
slot the agent has reused since (the trainer fell ``slots`` ticks behind) is reported, never misread.
"""

from __future__ import annotations

import ipaddress
import mmap
import os
import re
import secrets
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb

HEADER = struct.Struct("<q")
WRITING = -1
DEFAULT_DIR = "/dev/shm"
MAX_RING_BYTES = 1 << 30  # what a trainer agrees to map for one robot
_NAME = re.compile(r"^rlinf-ring-(\d+)-[0-9a-f]{16}$")  # rlinf-ring-<creator pid>-<random>


class FrameRingError(ValueError):
    """A ring that cannot be used: not on this host, the wrong size, or not ours."""


def slot_bytes_for(shapes: Sequence[tuple[int, int, int]]) -> int:
    """Bytes per slot for frames of these ``(H, W, 3)`` shapes: the header, then each frame."""
    return HEADER.size + sum(int(np.prod(shape)) for shape in shapes)


def remove_stale_rings(directory: str = DEFAULT_DIR) -> list[Path]:
    """Delete rings left by agents that died without closing them (their creator pid is gone)."""
    removed = []
    for path in Path(directory).glob("rlinf-ring-*"):
        match = _NAME.match(path.name)
        if match is None or _alive(int(match.group(1))):
            continue
        try:
            path.unlink()
            removed.append(path)
        except OSError:  # another user's, or gone already
            continue
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


class FrameRingWriter:
    """The agent's side: creates the ring and writes each observation's frames into the next slot."""

    def __init__(
        self, shapes: Sequence[tuple[int, int, int]], slots: int, directory: str = DEFAULT_DIR
    ) -> None:
        if slots < 2:
            raise FrameRingError(f"a frame ring needs at least 2 slots, got {slots}")
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self.slots, self.slot_bytes = slots, slot_bytes_for(self.shapes)
        self.offsets = np.cumsum([HEADER.size] + [int(np.prod(s)) for s in self.shapes])[:-1].tolist()
        remove_stale_rings(directory)
        self.path = Path(directory) / f"rlinf-ring-{os.getpid()}-{secrets.token_hex(8)}"
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, self.slots * self.slot_bytes)
            self._map = mmap.mmap(fd, self.slots * self.slot_bytes)
        finally:
            os.close(fd)
        self._bytes = np.frombuffer(self._map, np.uint8)
        for slot in range(slots):
            HEADER.pack_into(self._map, slot * self.slot_bytes, WRITING)

    def write(self, seq: int, images: Sequence[np.ndarray]) -> tuple[int, list[int]]:
        """Put ``images`` (in ring order) in the slot of ``seq``; returns (slot, byte offset of each)."""
        slot = seq % self.slots
        base = slot * self.slot_bytes
        HEADER.pack_into(self._map, base, WRITING)
        for image, shape, offset in zip(images, self.shapes, self.offsets):
            if image.shape != shape:
                raise FrameRingError(f"a {image.shape} frame does not fit the ring's {shape}")
            start = base + offset
            np.copyto(self._bytes[start : start + image.size].reshape(shape), image)
        HEADER.pack_into(self._map, base, seq)
        return slot, list(self.offsets)

    def close(self) -> None:
        self._bytes = None  # type: ignore[assignment]  (release the buffer before the map)
        self._map.close()
        self.path.unlink(missing_ok=True)


class FrameRingReader:
    """The trainer's side: maps an agent's ring read-only and copies frames out of it."""

    def __init__(self, path: str, slots: int, slot_bytes: int) -> None:
        resolved = Path(path)
        if resolved.parent != Path(DEFAULT_DIR) or not _NAME.match(resolved.name):
            raise FrameRingError(
                f"{path!r} is not a frame ring (expected {DEFAULT_DIR}/rlinf-ring-<pid>-<hex>)"
            )
        size = slots * slot_bytes
        if slots < 2 or slot_bytes <= HEADER.size or size > MAX_RING_BYTES:
            raise FrameRingError(f"a ring of {slots} x {slot_bytes} bytes is out of bounds")
        try:
            fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:  # another host's path, or another user's file
            raise FrameRingError(f"cannot open {path}: {exc.strerror}") from None
        try:
            if os.fstat(fd).st_size != size:
                raise FrameRingError(f"{path} holds {os.fstat(fd).st_size} bytes, not {slots} x {slot_bytes}")
            self._map = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self.path, self.slots, self.slot_bytes = str(resolved), slots, slot_bytes

    def holds(self, seq: int, slot: int) -> bool:
        """Whether ``slot`` holds the frames of observation ``seq`` (and is not being rewritten)."""
        return HEADER.unpack_from(self._map, slot * self.slot_bytes)[0] == seq

    def view(self, seq: int, slot: int, offset: int, nbytes: int) -> memoryview | None:
        """The frame at (slot, offset), not copied: copy it, then check :meth:`holds` again."""
        if not 0 <= slot < self.slots or offset < HEADER.size or offset + nbytes > self.slot_bytes:
            raise FrameRingError(f"frame at slot {slot}, offset {offset}, {nbytes} bytes is outside the ring")
        if not self.holds(seq, slot):
            return None
        base = slot * self.slot_bytes + offset
        return memoryview(self._map)[base : base + nbytes]

    def close(self) -> None:
        self._map.close()


def address_is_local(address: str) -> bool:
    """Whether ``host:port`` (``127.0.0.1:5000``, ``[::1]:5000``, ``localhost:5000``) names this host."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def peer_is_local(peer: str) -> bool:
    """Whether a gRPC peer string (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``, ``unix:...``) is this host."""
    kind, _, address = peer.partition(":")
    return kind == "unix" or (kind in ("ipv4", "ipv6") and address_is_local(address))


def materialize(observation, reader: FrameRingReader | None):
    """``observation`` with its ``CODEC_RING`` frames copied out of the ring as raw in-band frames
    (the same object when it has none); None when a slot no longer holds this observation (the
    trainer fell a ring behind): drop it."""
    ring = [frame for frame in observation.frames if frame.codec == pb.CODEC_RING]
    if not ring:
        return observation
    if reader is None:
        raise FrameRingError(f"camera {ring[0].camera!r}: a ring frame, but no frame ring was accepted")
    if len(ring) != len(observation.frames):
        raise FrameRingError("an observation mixes ring and in-band frames")
    pixels = {}
    for frame in ring:
        nbytes = int(frame.height) * int(frame.width) * 3
        view = reader.view(observation.seq, frame.ring_slot, frame.ring_offset, nbytes)
        if view is None:
            return None
        pixels[frame.camera] = view
    blob = b"".join(link_codec.observation_parts(observation, pixels))  # the one copy out of the ring
    for view in pixels.values():
        view.release()
    if not reader.holds(observation.seq, ring[0].ring_slot):  # rewritten while we copied
        return None
    return pb.Observation.FromString(blob)
