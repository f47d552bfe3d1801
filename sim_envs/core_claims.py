"""Claims on CPU cores, so that each vector-env worker on a machine gets a core of its own.

A claim is an exclusive ``flock`` on ``<claims dir>/cpu<N>.lock``. The kernel drops it when its
holder exits or dies, so a crashed trainer frees its cores at once and no stale file blocks anyone.
Two trainers on one machine thus pin their workers to different cores; where every allowed core is
claimed, a worker stays unpinned and the scheduler places it, as it would without claims.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Where the lock files live; tests and benchmarks point it at a folder of their own.
CLAIMS_DIR_ENV = "RLINF_CORE_CLAIMS_DIR"

_held: list[CoreClaim] = []  # this process's claims, held until it exits


@dataclass(frozen=True)
class CoreClaim:
    """An exclusive claim on ``core``, held while ``fd`` (a locked file) stays open."""

    core: int
    fd: int

    def release(self) -> None:
        os.close(self.fd)  # closing the file drops the lock


def claims_dir() -> Path:
    return Path(os.environ.get(CLAIMS_DIR_ENV) or Path(tempfile.gettempdir()) / "rlinf-core-claims")


def allowed_cores() -> set[int]:
    """The cores this process may run on (its affinity mask; every core where there is none)."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def claim_core(cores: Iterable[int], directory: Path | None = None) -> CoreClaim | None:
    """Claim the highest-numbered free core of ``cores`` (core 0 tends to take the machine's
    interrupts); ``None`` where all are claimed or the claims folder cannot be written."""
    directory = directory or claims_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o1777)  # other users' trainers claim here too
    except OSError:
        pass  # someone else's folder: its files may still be ours to lock
    for core in sorted(cores, reverse=True):
        try:
            fd = os.open(directory / f"cpu{core}.lock", os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held by another process
            os.close(fd)
            continue
        return CoreClaim(core, fd)
    return None


def pin_to_a_free_core() -> int | None:
    """Claim a free core among this process's allowed ones and pin this process to it, for the rest
    of its life. Returns the core; ``None`` (left unpinned) where none is free or the platform
    cannot pin."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    claim = claim_core(allowed_cores())
    if claim is None:
        return None
    try:
        os.sched_setaffinity(0, {claim.core})
    except OSError:
        claim.release()
        return None
    _held.append(claim)
    return claim.core
