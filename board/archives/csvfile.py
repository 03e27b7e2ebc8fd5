"""The archive format of agent 1.8.0: gzip-compressed CSV with a header row.

Columns are read by header name: their order depends on the migration history of the
agent's local database, old databases lack some, and newer agents may add more. An
upload is checked whole before anything is stored (gzip intact, UTF-8, CSV, the
columns the board needs, every timestamp on the day it claims), so a broken object is
refused with a reason and never half-stored.
"""

from __future__ import annotations

import csv
import gzip
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime

GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class TableSpec:
    daily: bool  # one object per closed UTC day (else one `_full` object)
    required: tuple[str, ...]


TABLES: dict[str, TableSpec] = {
    "gpu_sample": TableSpec(daily=True, required=("ts", "gpu_uuid", "util_pct")),
    "proc_sample": TableSpec(daily=True, required=("ts", "gpu_uuid", "pid")),
    "daemon_run": TableSpec(daily=False, required=("id", "started_at")),
    "gpu_device": TableSpec(daily=False, required=("gpu_uuid", "name", "memory_total_mb")),
}


class BadArchive(Exception):
    """The upload is not an archive the board can read; the message says why."""

    def __init__(self, detail: str, *, too_large: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.too_large = too_large


class _Limited(io.RawIOBase):
    """Decompressed bytes, cut off at a limit so a gzip bomb costs nothing."""

    def __init__(self, inner: gzip.GzipFile, limit: int) -> None:
        self._inner = inner
        self._left = limit
        self._limit = limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        chunk = self._inner.read(len(buffer))
        self._left -= len(chunk)
        if self._left < 0:
            raise BadArchive(
                f"The archive decompresses to more than {self._limit} bytes.", too_large=True
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


def open_rows(data: bytes, max_uncompressed: int) -> tuple[Columns, Iterator[list[str]]]:
    """The header and the data rows of a gzip CSV (errors surface as BadArchive)."""
    if not data.startswith(GZIP_MAGIC):
        raise BadArchive("The archive body is not gzip data (Content-Type: application/gzip).")
    raw = gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb")
    text = io.TextIOWrapper(
        io.BufferedReader(_Limited(raw, max_uncompressed)), encoding="utf-8", newline=""
    )
    reader = csv.reader(text, strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise BadArchive("The archive is empty: a CSV header row is required.") from None
    except Exception as exc:
        raise _as_bad(exc) from None
    names = tuple(h.strip() for h in header)
    if len(set(names)) != len(names):
        raise BadArchive("The archive's CSV header names a column twice.")

    def rows() -> Iterator[list[str]]:
        try:
            for row in reader:
                if row:
                    yield row
        except BadArchive:
            raise
        except Exception as exc:
            raise _as_bad(exc, reader.line_num) from None

    return Columns(names), rows()


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
    return BadArchive(f"The archive could not be read{at}: {exc}.")


def parse_ts(value: str) -> datetime:
    """An ISO 8601 timestamp with a UTC offset, as the agent writes them."""
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError(f"timestamp {value!r} has no UTC offset")
    return parsed


def validate(table: str, day: date | None, data: bytes, max_uncompressed: int) -> int:
    """Check a whole upload; the number of data rows, or BadArchive saying what is wrong."""
    spec = TABLES[table]
    columns, rows = open_rows(data, max_uncompressed)
    missing = [c for c in spec.required if c not in columns]
    if missing:
        raise BadArchive(
            f"The {table} archive is not the agent's CSV: its header lacks the column(s) "
            f"{', '.join(missing)}."
        )
    width = len(columns.names)
    ts_at = columns.index("ts")
    last_text = ""
    last: datetime | None = None
    count = 0
    for count, row in enumerate(rows, start=1):
        if len(row) != width:
            raise BadArchive(
                f"Row {count} of the {table} archive has {len(row)} fields; its header has {width}."
            )
        if not spec.daily or ts_at is None:
            continue
        text = row[ts_at]
        if text == last_text:
            continue
        try:
            ts = parse_ts(text)
        except ValueError:
            raise BadArchive(
                f"Row {count} of the {table} archive has ts {text!r}, not an ISO 8601 "
                "timestamp with a UTC offset."
            ) from None
        if ts.astimezone(UTC).date() != day:
            raise BadArchive(
                f"Row {count} of the {table} archive has ts {text}, which is not on the UTC day "
                f"{day}."
            )
        if last is not None and ts < last:
            raise BadArchive(f"The {table} archive is not ordered by ts (row {count}).")
        last_text, last = text, ts
    return count
