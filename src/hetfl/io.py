"""Atomic file writes and content hashes: a job writes all its outputs or none.

An output is written to a temporary file beside it, flushed to disk (fsync) and renamed onto its path;
the directory is fsynced after the rename, so a crash leaves the old file or the new one, never a torn
one. The temporary file is created with mode 0666 minus the umask, like any file the user creates
(mkstemp's 0600 would keep results from the group of a shared project directory).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any


class WriteError(OSError):
    """Writing an output failed (a full disk, no permission): the message names the file."""


def _create_beside(path: Path, suffix: str) -> Path:
    """A new empty file in path's directory, created 0666 & ~umask (O_EXCL: never someone else's)."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_savez(path: str | Path, **arrays) -> None:
    """np.savez of `arrays` to `path`, atomically (atomic_write). Written through an open file: given a
    file name, np.savez appends ".npz" to one that lacks it, so `hetfl trace --out x.npy` wrote an empty
    x.npy and its traces to a hidden temporary file beside it."""
    import numpy as np

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)

    atomic_write(path, write)


def atomic_write(path: str | Path, write: Callable[[Path], None], suffix: str = "") -> None:
    """Call `write(tmp)` on a temporary file beside `path`, fsync it, then rename it onto `path`.

    The temporary file keeps `path`'s suffix (writers such as savefig pick the format from it). An OSError
    while writing (ENOSPC from pyarrow names no file) is raised again as a WriteError naming `path`; the
    temporary file is removed and an existing `path` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _create_beside(path, suffix or path.suffix)
    try:
        write(tmp)
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and not isinstance(err, WriteError):
            reason = os.strerror(err.errno) if err.errno else str(err)
            raise WriteError(err.errno, f"cannot write {path}: {reason}") from err
        raise
    try:  # the rename itself reaches the disk with the directory; not every file system allows this
        _fsync(path.parent, directory=True)
    except OSError:
        pass


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
