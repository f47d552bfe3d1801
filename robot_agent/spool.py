"""Episodes spooled on the agent's disk until the trainer acknowledges them.

Layout: ``<spool_dir>/<episode_id>/steps.bin`` holds length-prefixed ``Observation`` messages,
appended and flushed as the episode runs (a step observed again while holding is appended again;
the newest record of a step wins); ``end.bin`` (an ``EpisodeEvent``, written to a temp file
and renamed) marks it complete. A directory without ``end.bin`` after a crash is closed as aborted on
the next start, keeping every step that was fully written. An acknowledged episode is deleted.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.atomic_files import write_atomic

_LENGTH = struct.Struct("<I")
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def spool_folder(spool_dir: str | Path, server: str, robot_id: str) -> Path:
    """Where a robot's unsent episodes wait: one folder per trainer address and robot id, so an
    episode recorded for one trainer is never uploaded to another (``127.0.0.1:50051`` ->
    ``127.0.0.1_50051``)."""
    trainer = re.sub(r"[^A-Za-z0-9._-]", "_", server) or "trainer"
    return Path(spool_dir).expanduser() / trainer / robot_id


class EpisodeSpool:
    """Append-only episode files; one writer (the control loop), readers after an episode ends."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._open: dict[str, object] = {}
        self._counts: dict[str, int] = {}
        self.recovered = self._close_interrupted()

    # -- writing -------------------------------------------------------------------------------
    def begin(self, episode_id: str) -> None:
        if not _SAFE_ID.match(episode_id):
            raise ValueError(f"episode id {episode_id!r} must be 1-128 of [A-Za-z0-9_.-]")
        folder = self.root / episode_id
        if folder.exists():
            raise ValueError(f"episode {episode_id!r} is already spooled")
        folder.mkdir()
        self._open[episode_id] = open(folder / "steps.bin", "ab")  # noqa: SIM115 (kept open for the episode)
        self._counts[episode_id] = 0

    def append(self, episode_id: str, observation: pb.Observation) -> None:
        handle = self._open[episode_id]
        data = observation.SerializeToString()
        handle.write(_LENGTH.pack(len(data)) + data)
        handle.flush()  # a killed process loses nothing that reached here
        self._counts[episode_id] += 1

    def append_with_pixels(
        self, episode_id: str, observation: pb.Observation, images: dict[str, np.ndarray]
    ) -> None:
        """Append ``observation`` with each frame's pixels written straight from ``images`` (raw).

        The record is the same ``Observation`` that :meth:`append` writes with raw frames in it, put
        together from its parts (:func:`protos.link_codec.observation_parts`): no copy of the pixels
        into a message, and the GIL is let go while the file takes them. For frames that went by the
        frame ring, whose message has no pixels.
        """
        handle = self._open[episode_id]
        pixels = {name: memoryview(np.ascontiguousarray(image)).cast("B") for name, image in images.items()}
        parts = link_codec.observation_parts(observation, pixels)
        handle.write(_LENGTH.pack(sum(len(part) for part in parts)))
        for part in parts:
            handle.write(part)
        handle.flush()
        self._counts[episode_id] += 1

    def finish(self, episode_id: str, end: pb.EpisodeEvent) -> None:
        handle = self._open.pop(episode_id)
        os.fsync(handle.fileno())
        handle.close()
        self._counts.pop(episode_id, None)
        write_atomic(self.root / episode_id / "end.bin", end.SerializeToString())

    # -- reading -------------------------------------------------------------------------------
    def pending(self) -> list[str]:
        """Complete episodes not yet acknowledged, oldest first. An episode acknowledged (deleted, by
        the link's thread) while this looks is left out, not an error."""
        ended = []
        for end in self.root.glob("*/end.bin"):
            try:
                ended.append((end.stat().st_mtime_ns, end.parent.name))
            except FileNotFoundError:
                continue
        return [name for _, name in sorted(ended)]

    def end_event(self, episode_id: str) -> pb.EpisodeEvent:
        return pb.EpisodeEvent.FromString((self.root / episode_id / "end.bin").read_bytes())

    def observations(self, episode_id: str) -> Iterator[pb.Observation]:
        """The episode's observations, one per step (the newest record of each), in step order."""
        newest = {obs.step: obs for obs in _read_records(self.root / episode_id / "steps.bin")}
        for step in sorted(newest):
            yield newest[step]

    def upload_parts(self, episode_id: str, max_part_bytes: int) -> Iterator[pb.EpisodeUpload]:
        """The episode as ``EpisodeUpload`` parts of at most about ``max_part_bytes`` each."""
        part, batch, size = 0, [], 0
        for obs in self.observations(episode_id):
            n = obs.ByteSize()
            if batch and size + n > max_part_bytes:
                yield pb.EpisodeUpload(episode_id=episode_id, part=part, observations=batch)
                part, batch, size = part + 1, [], 0
            batch.append(obs)
            size += n
        yield pb.EpisodeUpload(
            episode_id=episode_id, part=part, last=True, observations=batch, end=self.end_event(episode_id)
        )

    def acknowledge(self, episode_id: str) -> bool:
        """Delete an acknowledged episode; False if it was not spooled (a duplicate ack)."""
        if not _SAFE_ID.match(episode_id) or episode_id in self._open:
            return False
        folder = self.root / episode_id
        if not (folder / "end.bin").exists():
            return False
        shutil.rmtree(folder)
        return True

    def close(self) -> None:
        for handle in self._open.values():
            handle.close()
        self._open.clear()

    # -- recovery ------------------------------------------------------------------------------
    def _close_interrupted(self) -> list[str]:
        recovered = []
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir()):
            if (folder / "end.bin").exists():
                continue
            steps = folder / "steps.bin"
            seen = (
                {obs.step for obs in _read_records(steps, truncate_partial=True)} if steps.exists() else set()
            )
            if not seen:
                shutil.rmtree(folder)
                continue
            end = pb.EpisodeEvent(
                kind=pb.EpisodeEvent.ABORTED,
                episode_id=folder.name,
                num_steps=max(seen),
                reason="agent stopped mid-episode",
            )
            write_atomic(folder / "end.bin", end.SerializeToString())
            recovered.append(folder.name)
        return recovered


def _read_records(path: Path, truncate_partial: bool = False) -> Iterator[pb.Observation]:
    with open(path, "rb") as handle:
        good_end = 0
        while True:
            header = handle.read(_LENGTH.size)
            if len(header) < _LENGTH.size:
                break
            (length,) = _LENGTH.unpack(header)
            data = handle.read(length)
            if len(data) < length:
                break
            good_end = handle.tell()
            yield pb.Observation.FromString(data)
    if truncate_partial and good_end < path.stat().st_size:
        os.truncate(path, good_end)  # drop a record cut short by a crash
