"""Memory that a refused or ended session freed goes back to the OS, not into the allocator's heap;
and the garbage collector does not stop the link's loop to walk what start-up built.

glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB), so after one
20 MB message is freed the next ones are carved from the heap, and a heap grows but rarely shrinks:
a trainer that refused 40 large registrations held 17 MB more for each. With the threshold fixed,
every block over it is its own mapping, unmapped when freed. Elsewhere than glibc this does nothing.

A full collection walks every object the process holds: with torch, the policy and gRPC imported,
that is ~0.5 M objects and 30-110 ms in which the loop answers no robot (measured while one client
opened 400 sessions: the honest robot held). :func:`freeze_startup_heap` moves what exists at start
out of the collector's sight (``gc.freeze``), so later collections walk only what sessions made.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD_BYTES = 1 << 20


@functools.cache
def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


@functools.cache
def tune_allocator() -> bool:
    """Fix glibc's mmap threshold at 1 MiB (once per process); whether it applied."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD_BYTES)
    )


def return_freed_memory() -> None:
    """Collect reference cycles now and hand free heap pages back (after a large message is dropped)."""
    gc.collect(0)
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.cache
def freeze_startup_heap() -> int:
    """Collect once, then exempt every surviving object from later collections (once per process);
    how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
