"""Atomic writes: outputs follow the umask (not mkstemp's 0600), reach the disk before the rename, and a
failed write leaves nothing behind (issue 11, item 12)."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from hetfl import io


@pytest.fixture
def umask():
    """Set the process umask for one test, restore it after."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_outputs_follow_the_umask(tmp_path, umask, mask, mode):
    umask(mask)
    out = tmp_path / "results" / "run.json"
    io.atomic_write_json(out, {"status": "ok"})
    io.atomic_write(tmp_path / "m.parquet", lambda tmp: tmp.write_bytes(b"PAR1"))
    for path in (out, tmp_path / "m.parquet"):
        assert stat.S_IMODE(path.stat().st_mode) == mode, oct(path.stat().st_mode)


def test_a_rewrite_keeps_the_new_file_and_no_temporary(tmp_path):
    out = tmp_path / "a.txt"
    io.atomic_write_text(out, "old")
    io.atomic_write_text(out, "new")
    assert out.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_the_file_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    io.atomic_write_text(tmp_path / "a.txt", "x")
    assert events[:2] == ["fsync", "replace"]  # the data first, then the name (then the directory)


def test_a_failed_write_names_the_file_and_keeps_the_old_one(tmp_path):
    out = tmp_path / "metrics.parquet"
    io.atomic_write_text(out, "old")

    def full_disk(tmp):
        tmp.write_text("partial")
        raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")

    with pytest.raises(io.WriteError) as err:
        io.atomic_write(out, full_disk)
    assert err.value.errno == errno.ENOSPC
    assert str(err.value.strerror) == f"cannot write {out}: No space left on device"
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["metrics.parquet"]
