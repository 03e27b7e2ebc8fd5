"""Crash-safe file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

TEMP_PREFIX = "."
TEMP_SUFFIX = ".tmp"


def atomic_write(path: Path, data: bytes, *, mode: int = 0o600, overwrite: bool = True) -> None:
    """Write `data` to `path` via a temp file in the same directory, fsync and rename.

    With `overwrite=False` an existing `path` raises FileExistsError and is left alone,
    decided atomically (hard link) rather than by a racy exists() check.
    """
    fd, tmp_name = tempfile.mkstemp(
        dir=path.parent, prefix=f"{TEMP_PREFIX}{path.name}.", suffix=TEMP_SUFFIX
    )
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            tmp.unlink()
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in `directory` durable."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def is_temp_name(name: str) -> bool:
    """Whether a directory entry is an unfinished `atomic_write` temp file."""
    return name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)
