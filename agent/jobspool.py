"""Job records the board has not accepted yet, on disk, sent oldest first.

`gua-agent job start|end` puts its record here before it sends anything and then sends
what the spool holds, in order; what the board did not take (down, too slow for the
Prolog's few seconds) stays for the running agent, which sends the spool after each
snapshot the board accepts. One file per request body (`{"jobs": [one record]}`),
named so names sort in the order they were spooled, written atomically; bounded by
count and size, the oldest dropped first. One sender at a time (a lock file): a start
and the end of the same run must reach the board in that order.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent.client import Answer
from agent.fsutil import atomic_write, fsync_dir, is_temp_name

log = logging.getLogger(__name__)

DEFAULT_MAX_ENTRIES = 10_000
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
# A request body bigger than this is no job record of ours.
MAX_ENTRY_BYTES = 64 * 1024
_NAME = re.compile(r"[0-9]{20}-[0-9]{1,10}-[0-9a-f]{8}\.json")
_LOCK_NAME = ".lock"
_STALE_TEMP_SECONDS = 3600.0
# Below this many seconds of budget a request is not worth starting.
MIN_REQUEST_BUDGET = 0.05

Post = Callable[[bytes, float], Answer]
DrainStop = Literal["empty", "deadline", "board", "busy"]


@dataclass(frozen=True, slots=True)
class DrainResult:
    """What one pass over the spool did: `sent`, `dropped` (the board refused them),
    `left` in the spool, and why it stopped."""

    sent: int
    dropped: int
    left: int
    stopped: DrainStop


class JobSpool:
    """The job records' spool folder; several processes may share it."""

    def __init__(
        self,
        directory: Path,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.directory = directory
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._failing: str | None = None  # the last failure logged as a warning

    def put(self, body: bytes) -> Path | None:
        """Spool one request body; None if it is too big to keep. OSError when the
        folder cannot be written (the caller then sends without a spool)."""
        if len(body) > MAX_ENTRY_BYTES:
            log.error("a job record of %d bytes is too big to spool; dropped", len(body))
            return None
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}.json"
        path = self.directory / name
        atomic_write(path, body, mode=0o600)
        self.prune()
        return path

    def entries(self) -> list[Path]:
        """Spooled bodies, oldest first: regular files with an entry's name only."""
        found = []
        for name in sorted(self._names()):
            if _NAME.fullmatch(name) is None:
                continue
            path = self.directory / name
            try:
                if stat.S_ISREG(path.lstat().st_mode):
                    found.append(path)
            except OSError:
                continue
        return found

    def __len__(self) -> int:
        return len(self.entries())

    def prune(self) -> int:
        """Enforce the count and size caps, oldest first; how many entries were dropped."""
        now = time.time()
        for name in self._names():
            if is_temp_name(name):
                path = self.directory / name
                with contextlib.suppress(OSError):
                    if now - path.stat().st_mtime > _STALE_TEMP_SECONDS:
                        path.unlink()
        sized = []
        for path in self.entries():
            with contextlib.suppress(OSError):
                sized.append((path, path.stat().st_size))
        total = sum(size for _, size in sized)
        dropped = 0
        for path, size in sized:
            if len(sized) - dropped <= self.max_entries and total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                path.unlink()
            total -= size
            dropped += 1
        if dropped:
            with contextlib.suppress(OSError):
                fsync_dir(self.directory)
            log.warning("job spool full: dropped %d oldest job record(s)", dropped)
        return dropped

    def drain(
        self,
        post: Post,
        deadline: float,
        *,
        wait_for_lock: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> DrainResult:
        """Send the spool oldest first until it is empty, the deadline (monotonic) or a
        failure; `post(body, budget)` sends one body. Without the lock (another process
        is sending) nothing is sent: that process sends in order, this one's too."""
        if not self.entries():
            return DrainResult(0, 0, 0, "empty")  # and no folder or lock file made
        with self._locked(deadline if wait_for_lock else None, clock) as held:
            if not held:
                return DrainResult(0, 0, len(self), "busy")
            return self._drain(post, deadline, clock)

    def _drain(self, post: Post, deadline: float, clock: Callable[[], float]) -> DrainResult:
        sent = dropped = 0
        stopped: DrainStop = "empty"
        entries = self.entries()
        for index, path in enumerate(entries):
            budget = deadline - clock()
            if budget < MIN_REQUEST_BUDGET:
                stopped = "deadline"
                break
            body = self._read(path)
            if body is None:
                continue
            answer = post(body, budget)
            if answer.kind == "accepted":
                sent += 1
                self._failing = None
            elif answer.kind == "rejected" and answer.status not in (404, 405):
                log.error(
                    "the board refused job record %s (%s); dropped", path.name, answer.message
                )
                dropped += 1
            else:
                # Down, busy, a token it refuses, or a board without the jobs endpoint
                # yet (404): keep the record and the order, try again later.
                # The agent service tries every tick: say it once, until one goes through.
                level = logging.DEBUG if self._failing == answer.message else logging.WARNING
                kept = len(entries) - index
                log.log(level, "job records not sent (%s); %d kept", answer.message, kept)
                self._failing = answer.message
                stopped = "board"
                break
            self._remove(path)
        if sent:
            log.info("sent %d job record(s)", sent)
        return DrainResult(sent, dropped, len(self), stopped)

    def _read(self, path: Path) -> bytes | None:
        try:
            with path.open("rb") as fh:
                body = fh.read(MAX_ENTRY_BYTES + 1)
        except OSError:
            return None  # sent and removed meanwhile
        if len(body) > MAX_ENTRY_BYTES:
            log.warning("job spool entry %s is too big; dropped", path.name)
            self._remove(path)
            return None
        return body

    def _remove(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            path.unlink()
        with contextlib.suppress(OSError):
            fsync_dir(self.directory)

    def _names(self) -> list[str]:
        try:
            return os.listdir(self.directory)
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("the job spool %s cannot be listed (%s)", self.directory, exc)
            return []

    @contextmanager
    def _locked(self, deadline: float | None, clock: Callable[[], float]) -> Iterator[bool]:
        """Hold the spool's lock (True), waiting until `deadline` at most; False if not."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            log.warning("the job spool %s cannot be locked (%s)", self.directory, exc)
            yield False
            return
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline is None or clock() + 0.05 >= deadline:
                        yield False
                        return
                    time.sleep(0.05)
            yield True
        finally:
            os.close(fd)
