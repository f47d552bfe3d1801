"""One durable write for the whole project: old or new, never half, and the rename on disk."""

import os
import stat

import pytest

from protos.atomic_files import commit_folder, write_atomic


@pytest.fixture
def synced(monkeypatch) -> list[str]:
    """Paths fsynced, folders marked with a trailing slash."""
    calls: list[str] = []
    real = os.fsync

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        calls.append(path + "/" if stat.S_ISDIR(os.fstat(fd).st_mode) else path)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_write_atomic_replaces_the_file_and_syncs_it_then_its_folder(tmp_path, synced):
    target = tmp_path / "sub" / "eval.json"
    write_atomic(target, "old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new" and sorted(os.listdir(target.parent)) == ["eval.json"]
    assert synced[-2].endswith(".eval.tmp.json") and synced[-1] == f"{target.parent}/"


def test_a_failing_writer_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "policy.pt"
    write_atomic(target, b"good")

    def half_then_crash(tmp):
        tmp.write_bytes(b"ha")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_atomic(target, half_then_crash)
    assert target.read_bytes() == b"good" and os.listdir(tmp_path) == ["policy.pt"]


def test_writers_that_pick_a_format_by_suffix_get_the_suffix(tmp_path):
    seen = []
    write_atomic(tmp_path / "buffer.npz", lambda tmp: (seen.append(tmp.suffix), tmp.write_bytes(b"x")))
    assert seen == [".npz"]


def test_commit_folder_syncs_every_file_and_replaces_the_old_folder(tmp_path, synced):
    staging, final = tmp_path / ".step_10.tmp", tmp_path / "step_10"
    (staging / "inner").mkdir(parents=True)
    (staging / "policy.pt").write_bytes(b"p")
    (staging / "inner" / "buffer.npz").write_bytes(b"b")
    final.mkdir()
    (final / "stale").write_text("from a run that died")
    commit_folder(staging, final)
    assert sorted(p.name for p in final.rglob("*")) == ["buffer.npz", "inner", "policy.pt"]
    assert {str(staging / "policy.pt"), str(staging / "inner" / "buffer.npz")} <= set(synced)
    assert synced[-1] == f"{tmp_path}/"  # the rename into place is on disk too


def test_a_written_file_gets_the_usual_permissions_not_a_private_temporary_files(tmp_path):
    umask = os.umask(0o022)
    try:
        write_atomic(tmp_path / "cameras.json", "{}")
    finally:
        os.umask(umask)
    assert (
        tmp_path / "cameras.json"
    ).stat().st_mode & 0o777 == 0o644  # readable by the lab, as calibration files must be
