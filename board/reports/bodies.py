"""Kept utilization bodies: the rendered rows of closed, clean days, deflated once.

A 90-day report is tens of MiB of text. Rendering it (PostgreSQL writing each figure
as text) and compressing it took seconds on every request, while the days it covers
no longer change. So each key's (GPU's or host's) rows are kept per *block* of whole
units (UTC days for hourly buckets, local days for daily ones) as a raw deflate
segment that refers to nothing before it: a body is the kept segments of its blocks
and the live text of everything else (the open day, dirty days, cut edges), stitched
into one gzip stream without compressing the kept parts again (board.reportkit.streaming).

When a kept block may be sent: every UTC day it touches is clean in the report's
snapshot (no rollup_dirty_days mark) and the rollup_day_versions of those days add up
to the version it was rendered at. Any change to a day's hours marks it dirty in the
changing transaction, and only refresh_day_rollups clears a mark, bumping the day's
version in the same transaction; versions only grow. So a clean day at one version has
the same hours in every snapshot that sees it so, and a block rendered from one such
snapshot is the block any later one would render. A late observation for a closed day
marks it dirty (the block is rendered live) until the refresh, after which the version
differs. The key's fields (names) are part of the kept text and checked as well.

Blocks are aligned runs of 2^k units (at most MAX_BLOCK_UNITS), so a window that moves
by a day reuses the large blocks inside it; a window's body is a few blocks per key.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy import BigInteger, DateTime, Index, Integer, LargeBinary, PrimaryKeyConstraint
from sqlalchemy import Text as SqlText
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base
from board.reportkit.deflated import Deflated
from board.reportkit.params import HOUR, Window

log = logging.getLogger(__name__)

MAX_BLOCK_UNITS = 64
# The kind of kept bodies, with the version of their rows' text: raised whenever a row
# gains or changes a field, so a body kept before (by an older process, too) is never
# sent (2: the energy columns).
KEPT_KIND = "utilization.2"
DAY = timedelta(days=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ReportBody(Base):
    """One key's rendered rows of one block of one report (see the module)."""

    __tablename__ = "report_bodies"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    # <KEPT_KIND>:<groupBy>:<bucket>:<format>:<tz>
    report: Mapped[str] = mapped_column(SqlText)
    key_id: Mapped[int] = mapped_column(BigInteger)
    unit_lo: Mapped[int] = mapped_column(Integer)
    unit_hi: Mapped[int] = mapped_column(Integer)
    # The UTC hours the block covers (a refresh of a day deletes the blocks over it).
    span_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    span_end: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    version: Mapped[int] = mapped_column(BigInteger)
    prefix: Mapped[bytes] = mapped_column(LargeBinary)
    deflated: Mapped[bytes] = mapped_column(LargeBinary)
    crc: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(BigInteger)
    covered_us: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        # Blocks first: a report looks up the few blocks of its window, for every key.
        PrimaryKeyConstraint("workspace_id", "report", "unit_lo", "unit_hi", "key_id"),
        Index("ix_report_bodies_workspace_span", "workspace_id", "span_start"),
    )


# Zones other than UTC and the workspace's own that a workspace's bodies are kept in:
# kept per zone, a reader cycling through the zone database's ~600 names (and their
# posix/ and right/ copies) would otherwise store a copy of the history per name.
MAX_OTHER_ZONES = 2

_KEPT_KINDS = """
    WITH RECURSIVE kinds(report) AS (
        SELECT min(report) FROM report_bodies WHERE workspace_id = %(ws)s
        UNION ALL
        SELECT (SELECT min(b.report) FROM report_bodies b
                WHERE b.workspace_id = %(ws)s AND b.report > kinds.report)
        FROM kinds WHERE kinds.report IS NOT NULL
    )
    SELECT report FROM kinds WHERE report IS NOT NULL
"""


async def may_keep(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, zone: str, own: Sequence[str]
) -> bool:
    """Whether a report in `zone` may keep its blocks: always in the `own` zones, else
    only in a zone kept already or while fewer than MAX_OTHER_ZONES others are (a skip
    scan over the kinds kept, which this bound keeps few)."""
    if zone in own:
        return True
    cur = await conn.execute(_KEPT_KINDS, {"ws": workspace_id})
    kinds = [str(row[0]) for row in await cur.fetchall()]
    # Bodies of an older kind are never sent: they take no zone's place.
    zones = {k.split(":", 4)[-1] for k in kinds if k.startswith(KEPT_KIND + ":")} - set(own)
    return zone in zones or len(zones) < MAX_OTHER_ZONES


@dataclass(frozen=True)
class Piece:
    """Rows whose bucket starts lie in [lo, hi) (hi None: no end), in body order. A
    block (units set) may be kept; any other piece is always rendered live."""

    lo: datetime
    hi: datetime | None
    units: tuple[int, int] | None = None
    span: tuple[datetime, datetime] | None = None
    version: int = 0


@dataclass
class _Unit:
    number: int
    first_bucket: datetime
    hours: list[datetime]
    whole: bool


def _units(
    window: Window, bucket: str, buckets: Sequence[tuple[datetime, datetime]]
) -> list[_Unit]:
    """The window's hours grouped into units, in order; `buckets`: (hour, its bucket
    start) for each hour of the window and the hour after it, as PostgreSQL cuts them."""
    units: list[_Unit] = []
    inside = buckets[:-1]
    after_bucket = buckets[-1][1]
    for hour, start in inside:
        if bucket == "hour":
            number = (hour - EPOCH) // DAY
        else:
            number = window.local(start).date().toordinal()
        if units and units[-1].number == number:
            units[-1].hours.append(hour)
        else:
            units.append(_Unit(number, start, [hour], True))
    for unit in units:
        first, last = unit.hours[0], unit.hours[-1]
        if bucket == "hour":
            day = EPOCH + unit.number * DAY
            unit.whole = first == day and last == day + DAY - HOUR
        else:
            # A local day cut by the window's start or end is not whole.
            unit.whole = unit.first_bucket >= window.start and not (
                unit is units[-1] and after_bucket == unit.first_bucket
            )
    return units


def plan(
    window: Window,
    bucket: str,
    buckets: Sequence[tuple[datetime, datetime]],
    dirty: set[datetime],
    versions: dict[datetime, int],
    now: datetime,
) -> list[Piece]:
    """The window's pieces in order: blocks of whole, closed, clean units, and live
    pieces around them."""
    units = _units(window, bucket, buckets)

    def days_of(unit: _Unit) -> set[datetime]:
        # A unit is at most a local day: at most 25 hours, so its first and last hours'
        # UTC days and any between.
        first = EPOCH + ((unit.hours[0] - EPOCH) // DAY) * DAY
        last = EPOCH + ((unit.hours[-1] - EPOCH) // DAY) * DAY
        return {first + n * DAY for n in range((last - first) // DAY + 1)}

    keepable = [u.whole and u.hours[-1] + HOUR <= now and not (days_of(u) & dirty) for u in units]
    pieces: list[Piece] = []
    live_from: int | None = None
    i = 0
    while i < len(units):
        if not keepable[i]:
            live_from = i if live_from is None else live_from
            i += 1
            continue
        if live_from is not None:
            pieces.append(Piece(units[live_from].first_bucket, units[i].first_bucket))
            live_from = None
        # The largest aligned block of consecutive keepable units starting here.
        size = MAX_BLOCK_UNITS
        while size > 1 and (
            units[i].number % size
            or i + size > len(units)
            or not all(keepable[i : i + size])
            or units[i + size - 1].number != units[i].number + size - 1
        ):
            size //= 2
        block = units[i : i + size]
        days = set().union(*(days_of(u) for u in block))
        hi = units[i + size].first_bucket if i + size < len(units) else None
        pieces.append(
            Piece(
                block[0].first_bucket,
                hi,
                (block[0].number, block[0].number + size),
                (block[0].hours[0], block[-1].hours[-1] + HOUR),
                sum(versions.get(d, 0) for d in days),
            )
        )
        i += size
    if live_from is not None:
        pieces.append(Piece(units[live_from].first_bucket, None))
    return pieces


async def day_states(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, window: Window
) -> tuple[set[datetime], dict[datetime, int]]:
    """The window's dirty UTC days and the days' versions, in the report's snapshot."""
    values = {
        "ws": workspace_id,
        "lo": window.start.replace(hour=0) - DAY,
        "hi": window.end + DAY,
    }
    cur = await conn.execute(
        "SELECT day_start FROM rollup_dirty_days WHERE workspace_id = %(ws)s "
        "AND day_start >= %(lo)s AND day_start < %(hi)s",
        values,
    )
    dirty = {r[0] for r in await cur.fetchall()}
    cur = await conn.execute(
        "SELECT day_start, version FROM rollup_day_versions WHERE workspace_id = %(ws)s "
        "AND day_start >= %(lo)s AND day_start < %(hi)s",
        values,
    )
    return dirty, {r[0]: int(r[1]) for r in await cur.fetchall()}


class KeptReader:
    """The kept segments a report may send, read in body order (key name order, then
    time) from one server-side cursor, a key at a time: one read for the whole report,
    a few hundred segments in the worker at once. Only blocks of this report's plan, at
    their version, with the key's fields as this report has them, are read."""

    # Segments per fetch: an hourly block of 64 days is up to ~60 kB, a daily one ~4 kB.
    FETCH = {"hour": 200, "day": 2_000}

    def __init__(self, conn: psycopg.AsyncConnection[Any], bucket: str) -> None:
        self.cur: psycopg.AsyncServerCursor[Any] = conn.cursor(name="kept_bodies", binary=True)
        self.fetch = self.FETCH[bucket]
        self.rows: list[Any] = []
        self.at = 0
        self.done = False

    async def open(
        self,
        workspace_id: int,
        report: str,
        prefixes: Sequence[bytes],
        keys: Sequence[int],
        blocks: Sequence[Piece],
    ) -> None:
        kept = [b for b in blocks if b.units]
        if not kept or not keys:
            self.done = True
            return
        await self.cur.execute(
            """
            SELECT k.ord, b.unit_lo, b.deflated, b.crc, b.size, b.covered_us
            FROM report_bodies b
            JOIN unnest(%(keys)b::bigint[], %(ords)b::int[], %(prefixes)b::bytea[])
                 AS k(id, ord, prefix) ON b.key_id = k.id AND b.prefix = k.prefix
            JOIN unnest(%(los)s::int[], %(his)s::int[], %(versions)s::bigint[])
                 AS v(lo, hi, version)
              ON b.unit_lo = v.lo AND b.unit_hi = v.hi AND b.version = v.version
            WHERE b.workspace_id = %(ws)s AND b.report = %(report)s
              AND b.unit_lo = ANY(%(los)s)
            ORDER BY k.ord, b.unit_lo
            """,
            {
                "ws": workspace_id,
                "report": report,
                "keys": list(keys),
                "ords": list(range(len(keys))),
                "prefixes": list(prefixes),
                "los": [b.units[0] for b in kept if b.units],
                "his": [b.units[1] for b in kept if b.units],
                "versions": [b.version for b in kept],
            },
        )

    async def take(self, ordinal: int) -> dict[int, Deflated]:
        """The kept segments of the key at `ordinal`, by their block's first unit."""
        found: dict[int, Deflated] = {}
        while not self.done:
            if self.at == len(self.rows):
                self.rows = await self.cur.fetchmany(self.fetch)
                self.at = 0
                if not self.rows:
                    self.done = True
                    break
            row = self.rows[self.at]
            if row[0] != ordinal:
                break
            found[row[1]] = Deflated(row[2], row[3], row[4], row[5])
            self.at += 1
        return found

    async def close(self) -> None:
        # The report's connection may be broken already (a client gone mid-query): it
        # is closed next anyway, with the cursor.
        with contextlib.suppress(psycopg.Error):
            await self.cur.close()


@dataclass
class Keeper:
    """Writes newly rendered blocks on a connection of its own (the report's is
    read-only, and its snapshot must stay the one it started with), a few MiB at a time
    so the worker never holds more than ~1 MB of them."""

    connect: Callable[[], Any]
    workspace_id: int
    report: str
    flush_bytes: int = 1 << 20
    conn: psycopg.AsyncConnection[Any] | None = None
    rows: list[tuple[Any, ...]] | None = None
    pending: int = 0
    failed: bool = False

    async def add(self, key_id: int, prefix: bytes, block: Piece, segment: Deflated) -> None:
        assert block.units is not None
        assert block.span is not None
        if self.failed:
            return
        self.rows = self.rows or []
        self.rows.append((key_id, *block.units, *block.span, block.version, prefix, segment))
        self.pending += len(segment.data)
        if self.pending >= self.flush_bytes:
            await self.flush()

    async def flush(self) -> None:
        """Write what is pending. Keeping is best effort: a failure (the database busy,
        a lock timeout) is logged and keeping stops; the report goes on unharmed."""
        # In key order, so reports keeping the same blocks at once never deadlock.
        rows = sorted(self.rows or [], key=lambda r: (r[1], r[2], r[0]))
        self.rows, self.pending = [], 0
        if not rows or self.failed:
            return
        try:
            if self.conn is None:
                self.conn = await self.connect()
                # A refresh deleting these rows holds them until it commits: wait a
                # little, never long, with the client waiting for its body.
                await self.conn.execute("SET lock_timeout = '2s'")
            await self._write(rows)
        except psycopg.Error as exc:
            log.warning("report bodies: not kept (%s)", exc)
            self.failed = True
            await self.close()

    async def _write(self, rows: list[tuple[Any, ...]]) -> None:
        assert self.conn is not None
        await self.conn.execute(
            """
            INSERT INTO report_bodies AS b (workspace_id, report, key_id, unit_lo, unit_hi,
                span_start, span_end, version, prefix, deflated, crc, size, covered_us)
            SELECT %(ws)s, %(report)s, r.* FROM unnest(%(keys)b::bigint[], %(los)b::int[],
                %(his)b::int[], %(starts)b::timestamptz[], %(ends)b::timestamptz[],
                %(versions)b::bigint[], %(prefixes)b::bytea[], %(data)b::bytea[],
                %(crcs)b::bigint[], %(sizes)b::bigint[], %(covered)b::bigint[]) AS r
            ON CONFLICT (workspace_id, report, unit_lo, unit_hi, key_id) DO UPDATE SET
                span_start = EXCLUDED.span_start, span_end = EXCLUDED.span_end,
                version = EXCLUDED.version, prefix = EXCLUDED.prefix,
                deflated = EXCLUDED.deflated, crc = EXCLUDED.crc, size = EXCLUDED.size,
                covered_us = EXCLUDED.covered_us
            """,
            {
                "ws": self.workspace_id,
                "report": self.report,
                "keys": [r[0] for r in rows],
                "los": [r[1] for r in rows],
                "his": [r[2] for r in rows],
                "starts": [r[3] for r in rows],
                "ends": [r[4] for r in rows],
                "versions": [r[5] for r in rows],
                "prefixes": [r[6] for r in rows],
                "data": [r[7].data for r in rows],
                "crcs": [r[7].crc for r in rows],
                "sizes": [r[7].size for r in rows],
                "covered": [r[7].covered for r in rows],
            },
        )

    async def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            await conn.close()
            _release_freed_memory()


def _release_freed_memory() -> None:
    """Hand the heap memory a keeping report freed back to the system (glibc keeps it
    otherwise: a report that kept 90 days per GPU left the worker ~10 MiB larger)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to do


async def forget_bodies_of_days(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, days: list[datetime]
) -> None:
    """Delete the kept blocks over `days`, whose day rollups were just refreshed (run in
    that refresh's transaction: board.rollups.daily.refresh_day_rollups).

    They can never be sent again (the days' versions moved on), and any written later
    from an older snapshot carry the older version. Rows a report is writing just now
    are skipped, not waited for: they can never be sent either, and the refresh never
    waits on a report (nor deadlocks with one).
    """
    await conn.execute(
        """
        DELETE FROM report_bodies
        WHERE (workspace_id, report, unit_lo, unit_hi, key_id) IN (
            SELECT b.workspace_id, b.report, b.unit_lo, b.unit_hi, b.key_id
            FROM report_bodies b
            JOIN unnest(%(days)s::timestamptz[]) AS d(day)
              ON b.span_start < d.day + interval '1 day' AND b.span_end > d.day
            WHERE b.workspace_id = %(ws)s
            FOR UPDATE OF b SKIP LOCKED)
        """,
        {"ws": workspace_id, "days": days},
    )
