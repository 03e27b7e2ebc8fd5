"""A bounded on-disk queue of snapshots the board has not accepted yet.

One file per snapshot holding the exact request body, named by its `observedAt` in
UTC (`20261202T174236.516146Z.json`) so names sort by time, written atomically.
Capped by total size and by age; the oldest go first. The board is idempotent on
`observedAt`, so a snapshot replayed twice (say, the agent died between the board's
answer and the delete) is harmless.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agent.fsutil import atomic_write, fsync_dir, is_temp_name

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_AGE = timedelta(days=7)
_NAME_FORMAT = "%Y%m%dT%H%M%S.%fZ"
_SUFFIX = ".json"
# A temp file this old belongs to a writer that died.
_STALE_TEMP_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class SpoolEntry:
    """One spooled snapshot."""

    path: Path
    observed_at: datetime
    size: int

    @property
    def name(self) -> str:
        return self.path.name


def entry_name(observed_at: datetime) -> str:
    """The file name a snapshot observed at `observed_at` is spooled under."""
    return observed_at.astimezone(UTC).strftime(_NAME_FORMAT) + _SUFFIX


def _parse_name(name: str) -> datetime | None:
    if not name.endswith(_SUFFIX):
        return None
    try:
        return datetime.strptime(name[: -len(_SUFFIX)], _NAME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


class Spool:
    """The spool directory. Several `Spool` objects (or processes) may share one directory."""

    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_age: timedelta = DEFAULT_MAX_AGE,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_age = max_age
        self._clock = clock

    def put(self, body: bytes) -> SpoolEntry | None:
        """Spool one encoded snapshot; None if it was too old or too big to keep."""
        observed_at = _observed_at(body)
        if observed_at is None:
            log.error("not spooling a snapshot without a readable observedAt")
            return None
        if self._clock() - observed_at > self.max_age:
            log.warning("snapshot of %s is past the spool's age cap; dropped", observed_at)
            return None
        if len(body) > self.max_bytes:
            log.warning("snapshot of %d bytes exceeds the spool cap; dropped", len(body))
            return None
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.directory / entry_name(observed_at)
        atomic_write(path, body, mode=0o600)
        self.prune()
        return SpoolEntry(path, observed_at, len(body))

    def entries(self) -> list[SpoolEntry]:
        """Spooled snapshots, oldest first: regular files with an entry's name only.

        A spool that cannot be listed (the path is a file, no permission) or an entry that
        is not a regular file (a directory, a symlink loop) is passed over with a warning:
        it used to end the agent's loop on every start, and the host went dark."""
        out: list[SpoolEntry] = []
        names = self._names()
        for name in sorted(names):
            observed_at = _parse_name(name)
            if observed_at is None:
                continue
            path = self.directory / name
            try:
                status = path.stat()
            except FileNotFoundError:  # drained meanwhile by another process
                continue
            except OSError as exc:
                log.warning("spool entry %s cannot be read (%s); passed over", name, exc)
                continue
            if not stat.S_ISREG(status.st_mode):
                log.warning("spool entry %s is not a regular file; passed over", name)
                continue
            out.append(SpoolEntry(path, observed_at, status.st_size))
        return out

    def _names(self) -> list[str]:
        try:
            return os.listdir(self.directory)
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("the spool %s cannot be listed (%s)", self.directory, exc)
            return []

    def __len__(self) -> int:
        return len(self.entries())

    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries())

    def read(self, entry: SpoolEntry) -> bytes | None:
        """The entry's body, or None if it has gone (another drainer took it)."""
        try:
            return entry.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("spool entry %s cannot be read (%s); passed over", entry.name, exc)
            return None

    def remove(self, entry: SpoolEntry) -> None:
        try:
            entry.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("spool entry %s cannot be removed (%s)", entry.name, exc)
            return
        with contextlib.suppress(OSError):
            fsync_dir(self.directory)

    def prune(self) -> int:
        """Enforce the age and size caps, oldest first; returns how many entries were dropped."""
        self._remove_stale_temps()
        entries = self.entries()
        cutoff = self._clock() - self.max_age
        total = sum(e.size for e in entries)
        dropped = 0
        for entry in entries:
            if entry.observed_at >= cutoff and total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                entry.path.unlink()
            total -= entry.size
            dropped += 1
        if dropped:
            with contextlib.suppress(OSError):
                fsync_dir(self.directory)
            log.warning("spool full or expired: dropped %d oldest snapshot(s)", dropped)
        return dropped

    def _remove_stale_temps(self) -> None:
        now = time.time()
        for name in self._names():
            if not is_temp_name(name):
                continue
            path = self.directory / name
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > _STALE_TEMP_SECONDS:
                    path.unlink()


def _observed_at(body: bytes) -> datetime | None:
    try:
        value = json.loads(body).get("observedAt")
        parsed = datetime.fromisoformat(value)
    except (ValueError, TypeError, AttributeError):
        return None
    return parsed if parsed.tzinfo is not None else None
