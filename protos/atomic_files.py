"""Files that are either the old version or the new one, never half of either, and on disk once written.

Every durable write in the project goes through here: the write goes to a temporary file in the same
folder, which is fsynced, renamed over the target, and then the folder is fsynced so the rename itself
survives a power cut. A writer that fails leaves the old file untouched and no temporary behind.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path


def temporary_path(path: Path) -> Path:
    """A hidden sibling that keeps the suffix (writers like imageio and numpy choose formats by it)."""
    return path.with_name(f".{path.stem}.tmp{path.suffix}")


def fsync_dir(folder: str | Path) -> None:
    """Make the entries of ``folder`` (a rename into it, a new file) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str | Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def write_atomic(path: str | Path, content: bytes | str | Callable[[Path], None]) -> None:
    """Replace ``path`` with ``content`` (bytes, text, or a function that writes the file it is given)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        if callable(content):
            content(tmp)
        elif isinstance(content, bytes):
            tmp.write_bytes(content)
        else:
            tmp.write_text(content)
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def replace_durably(source: str | Path, target: str | Path) -> None:
    """Move a finished file or folder into place (``source`` must be on the same file system)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, target)
    fsync_dir(target.parent)


def commit_folder(staging: str | Path, final: str | Path) -> None:
    """Make every file under ``staging`` durable, then put the folder at ``final`` (replacing one there)."""
    staging, final = Path(staging), Path(final)
    for folder, _, files in os.walk(staging):
        for name in files:
            fsync_file(Path(folder) / name)
        fsync_dir(folder)
    if final.exists():
        shutil.rmtree(final)
    replace_durably(staging, final)


__all__ = ["commit_folder", "fsync_dir", "replace_durably", "temporary_path", "write_atomic"]
