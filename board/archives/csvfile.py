"""The archive format of agent 1.8.0: gzip-compressed CSV with a header row.

Columns are read by header name: their order depends on the migration history of the
agent's local database, old databases lack some, and newer agents may add more. An
upload is checked whole before anything is stored (gzip intact, UTF-8, CSV, the
columns the board needs, every timestamp on the day it claims), so a broken object is
refused with a reason and never half-stored.

Everything is read as a stream under limits (`Limits`, from the settings): what an
object decompresses to, its rows, the length of a record, its columns, and the rows and
text of one instant. The first limit passed stops the work, so a hostile object costs
no more than a real one of the largest size, and memory never grows with the file.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import BinaryIO

from board.settings import Settings

GZIP_MAGIC = b"\x1f\x8b"
DIGEST_BLOCK_BYTES = 1024 * 1024
NOT_GZIP = "The archive body is not gzip data (Content-Type: application/gzip)."
# Below this, the expansion limit does not apply: a small real object may compress well.
EXPANSION_FLOOR = 4 * 1024 * 1024
# A workspace can allow at most this many GPUs per host (workspaces.max_gpus_per_host).
MAX_DEVICE_ROWS = 4096
_STOP_EVERY = 1024  # lines between looks at the stop flag


@dataclass(frozen=True)
class TableSpec:
    daily: bool  # one object per closed UTC day (else one `_full` object)
    required: tuple[str, ...]
    max_rows: int | None = None  # below the general row limit


TABLES: dict[str, TableSpec] = {
    "gpu_sample": TableSpec(daily=True, required=("ts", "gpu_uuid", "util_pct")),
    "proc_sample": TableSpec(daily=True, required=("ts", "gpu_uuid", "pid")),
    "daemon_run": TableSpec(daily=False, required=("id", "started_at")),
    "gpu_device": TableSpec(
        daily=False, required=("gpu_uuid", "name", "memory_total_mb"), max_rows=MAX_DEVICE_ROWS
    ),
}


class BadArchive(Exception):
    """The upload is not an archive the board can read; the message says why."""

    def __init__(self, detail: str, *, too_large: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.too_large = too_large


class Stopped(Exception):
    """The reading was called off (its request went away); nothing to report."""


@dataclass(frozen=True)
class Limits:
    """What one archive object may cost to read (see the archive_* settings)."""

    uncompressed_bytes: int
    expansion: int
    rows: int
    row_chars: int
    columns: int
    tick_rows: int
    tick_chars: int

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(
            uncompressed_bytes=settings.archive_max_uncompressed_bytes,
            expansion=settings.archive_max_expansion,
            rows=settings.archive_max_rows,
            row_chars=settings.archive_max_row_chars,
            columns=settings.archive_max_columns,
            tick_rows=settings.archive_max_tick_rows,
            tick_chars=settings.archive_max_tick_chars,
        )

    def uncompressed_for(self, compressed: int) -> tuple[int, str]:
        """The decompressed size allowed for an object of `compressed` bytes, and why."""
        by_ratio = max(EXPANSION_FLOOR, self.expansion * compressed)
        if by_ratio < self.uncompressed_bytes:
            return by_ratio, (
                f"{self.expansion} times its compressed size of {compressed} bytes "
                "(GUA_BOARD_ARCHIVE_MAX_EXPANSION)"
            )
        return self.uncompressed_bytes, "GUA_BOARD_ARCHIVE_MAX_UNCOMPRESSED_BYTES"


class _Limited(io.RawIOBase):
    """Decompressed bytes, cut off at a limit so a gzip bomb costs nothing."""

    def __init__(self, inner: gzip.GzipFile, limit: int, why: str) -> None:
        self._inner = inner
        self._left = limit
        self._limit = limit
        self._why = why

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        chunk = self._inner.read(len(buffer))
        self._left -= len(chunk)
        if self._left < 0:
            raise BadArchive(
                f"The archive decompresses to more than {self._limit} bytes, the limit "
                f"({self._why}).",
                too_large=True,
            )
        buffer[: len(chunk)] = chunk
        return len(chunk)


@dataclass(frozen=True)
class Columns:
    """Header name → position; a column the file lacks reads as empty (null)."""

    names: tuple[str, ...]

    def index(self, name: str) -> int | None:
        try:
            return self.names.index(name)
        except ValueError:
            return None

    def __contains__(self, name: object) -> bool:
        return name in self.names


def size_of(source: BinaryIO) -> int:
    """The byte size of a seekable binary file, left at its start."""
    size = source.seek(0, io.SEEK_END)
    source.seek(0)
    return size


class ArchiveReader:
    """The header and the data rows of a gzip CSV, streamed within `limits`.

    Iterating yields each data row (as many fields as the header: checked here) and
    leaves the record's length in characters in `row_chars`. Errors surface as
    BadArchive; a set `stop` flag ends the reading with Stopped.
    """

    def __init__(
        self, source: BinaryIO, limits: Limits, stop: threading.Event | None = None
    ) -> None:
        self.limits = limits
        self._stop = stop
        size = size_of(source)
        if source.read(2) != GZIP_MAGIC:
            raise BadArchive(NOT_GZIP)
        source.seek(0)
        limit, why = limits.uncompressed_for(size)
        raw = gzip.GzipFile(fileobj=source, mode="rb")
        self._text = io.TextIOWrapper(
            io.BufferedReader(_Limited(raw, limit, why)), encoding="utf-8", newline=""
        )
        self._pending = 0  # characters of the record being read
        self._lines_left = limits.rows + 1  # the header
        self.row_chars = 0
        self.rows = 0
        self._csv = csv.reader(self._lines(), strict=True)
        try:
            header = next(self._csv)
        except StopIteration:
            raise BadArchive("The archive is empty: a CSV header row is required.") from None
        except Stopped:
            raise
        except Exception as exc:
            raise _as_bad(exc) from None
        self._pending = 0
        if len(header) > limits.columns:
            raise BadArchive(
                f"The archive's CSV header has {len(header)} columns, more than the limit of "
                f"{limits.columns} (GUA_BOARD_ARCHIVE_MAX_COLUMNS).",
                too_large=True,
            )
        names = tuple(h.strip() for h in header)
        if len(set(names)) != len(names):
            raise BadArchive("The archive's CSV header names a column twice.")
        self.columns = Columns(names)

    def _lines(self) -> Iterator[str]:
        """Lines of text, each checked before the CSV parser sees it.

        Lines, not only rows, count against the row limit: blank lines and quoted
        fields spanning many lines cost as much to read as rows, and the agent writes
        one line per row.
        """
        readline = self._text.readline
        cap = self.limits.row_chars
        stop = self._stop
        while line := readline(cap + 1):
            self._lines_left -= 1
            if self._lines_left < 0:
                raise _too_many_rows(self.limits.rows)
            if stop is not None and self._lines_left % _STOP_EVERY == 0 and stop.is_set():
                raise Stopped
            self._pending += len(line)
            if self._pending > cap:
                raise BadArchive(
                    f"A record of the archive (line {self._csv.line_num + 1}) is longer than "
                    f"the limit of {cap} characters (GUA_BOARD_ARCHIVE_MAX_ROW_CHARS).",
                    too_large=True,
                )
            if "\x00" in line:
                raise BadArchive(
                    f"The archive holds a NUL character (line {self._csv.line_num + 1}); "
                    "the board's database cannot store one."
                )
            yield line

    def __iter__(self) -> Iterator[list[str]]:
        reader = self._csv
        width = len(self.columns.names)
        try:
            for row in reader:
                self.row_chars, self._pending = self._pending, 0
                if not row:
                    continue  # a blank line
                self.rows += 1
                if len(row) != width:
                    raise BadArchive(
                        f"Row {self.rows} of the archive has {len(row)} fields; its header "
                        f"has {width}."
                    )
                yield row
        except (BadArchive, Stopped):
            raise
        except Exception as exc:
            raise _as_bad(exc, reader.line_num) from None


def _too_many_rows(limit: int) -> BadArchive:
    return BadArchive(
        f"The archive has more than {limit} rows, the limit (GUA_BOARD_ARCHIVE_MAX_ROWS).",
        too_large=True,
    )


def _as_bad(exc: Exception, line: int | None = None) -> BadArchive:
    at = f" (line {line})" if line else ""
    if isinstance(exc, BadArchive):
        return exc
    if isinstance(exc, gzip.BadGzipFile | EOFError | zlib.error | OSError):
        return BadArchive(f"The archive is not valid gzip data{at}: {exc}.")
    if isinstance(exc, UnicodeDecodeError):
        return BadArchive(f"The archive is not UTF-8 text{at}.")
    if isinstance(exc, csv.Error):
        return BadArchive(f"The archive is not valid CSV{at}: {exc}.")
    return BadArchive(f"The archive could not be read{at}: {type(exc).__name__}.")


def parse_ts(value: str) -> datetime:
    """An ISO 8601 timestamp with a UTC offset, as the agent writes them, as UTC.

    ValueError for anything else, also for a time whose UTC equivalent is out of
    range (0001-01-01T00:00+01:00).
    """
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError(f"timestamp {value!r} has no UTC offset")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"timestamp {value!r} is out of range") from None


def _short(text: str, limit: int = 64) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


@dataclass(frozen=True)
class Checked:
    rows: int
    sha256: str


def validate(
    table: str,
    day: date | None,
    data: bytes | BinaryIO,
    limits: Limits,
    stop: threading.Event | None = None,
) -> Checked:
    """Check a whole upload (its bytes, or a seekable file of them): its rows and digest,
    or BadArchive saying what is wrong."""
    spec = TABLES[table]
    # The digest here, in the caller's thread, not on the event loop; a file in blocks.
    source: BinaryIO
    if isinstance(data, bytes):
        digest, source = hashlib.sha256(data), io.BytesIO(data)
    else:
        digest, source = hashlib.sha256(), data
        source.seek(0)
        while block := source.read(DIGEST_BLOCK_BYTES):
            digest.update(block)
        source.seek(0)
    reader = ArchiveReader(source, limits, stop)
    columns = reader.columns
    missing = [c for c in spec.required if c not in columns]
    if missing:
        raise BadArchive(
            f"The {table} archive is not the agent's CSV: its header lacks the column(s) "
            f"{', '.join(missing)}."
        )
    ts_at = columns.index("ts") if spec.daily else None
    if ts_at is None:
        for _ in reader:
            if spec.max_rows is not None and reader.rows > spec.max_rows:
                raise BadArchive(
                    f"The {table} archive has more than {spec.max_rows} rows, the most GPUs "
                    "a workspace can allow a host.",
                    too_large=True,
                )
        return Checked(reader.rows, digest.hexdigest())
    _check_ticks(table, day, reader, ts_at)
    return Checked(reader.rows, digest.hexdigest())


def _check_ticks(table: str, day: date | None, reader: ArchiveReader, ts_at: int) -> None:
    """Every ts on the day, in order, and no instant larger than the tick limits."""
    limits = reader.limits
    last_text = ""
    last: datetime | None = None
    tick_rows = tick_chars = 0
    for row in reader:
        text = row[ts_at]
        if text == last_text:
            tick_rows += 1
            tick_chars += reader.row_chars
            if tick_rows > limits.tick_rows or tick_chars > limits.tick_chars:
                raise _tick_too_large(table, text, limits)
            continue
        count = reader.rows
        try:
            ts = parse_ts(text)
        except ValueError:
            raise BadArchive(
                f"Row {count} of the {table} archive has ts {_short(text)}, not an ISO 8601 "
                "timestamp with a UTC offset."
            ) from None
        if ts.date() != day:
            raise BadArchive(
                f"Row {count} of the {table} archive has ts {_short(text)}, which is not on "
                f"the UTC day {day}."
            )
        if last is not None and ts < last:
            raise BadArchive(f"The {table} archive is not ordered by ts (row {count}).")
        if ts != last:
            tick_rows = tick_chars = 0
        tick_rows += 1
        tick_chars += reader.row_chars
        if tick_rows > limits.tick_rows or tick_chars > limits.tick_chars:
            raise _tick_too_large(table, text, limits)
        last_text, last = text, ts


def _tick_too_large(table: str, text: str, limits: Limits) -> BadArchive:
    return BadArchive(
        f"The {table} archive has more than {limits.tick_rows} rows or {limits.tick_chars} "
        f"characters at ts {_short(text)}, the limit for one instant "
        "(GUA_BOARD_ARCHIVE_MAX_TICK_ROWS, GUA_BOARD_ARCHIVE_MAX_TICK_CHARS).",
        too_large=True,
    )
