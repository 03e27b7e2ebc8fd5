"""Reading bookings for the write path, writing figure deltas, and ticks from raw samples.

All three run on a psycopg connection inside the caller's transaction, whose host rows
are locked already: ingest batches and booking changes of one host never interleave.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import psycopg

from board.db.pgtext import bigint_array, int_array, text_array
from board.reservations.crediting import Booking, ReservationDelta
from board.rollups.crediting import HOUR_US, RollupDelta, to_us
from board.rollups.gaps import WIDEST_SQL
from board.rollups.store import upsert_rollup_delta


class HostSpan(NamedTuple):
    """The stretch [lo, hi] of one host's history a batch credits intervals in."""

    workspace_id: int
    host_id: int
    lo: datetime
    hi: datetime


# Each span's bookings found from its host, whatever the statistics say: a plan that
# started from the workspace's reservations (the one chosen while they were freshly
# written and not analyzed yet) read every booking of the workspace per host, ~10 ms a
# batch at 300 booked hosts. OFFSET 0 keeps the lateral subquery from being merged into
# the join (and so the (workspace_id, host_id) index probe per span); the Linux users
# are a primary-key probe per booked GPU. The overlap with [lo, hi] is written as the
# two comparisons it means for a booking [start, end) (during_bounded): `during && …`
# let the planner AND in the no-overlap GiST index, which returns every booking in force
# in the workspace, per host (0.6-0.75 s a batch with 300 booked hosts and a year of
# daily bookings, bench/bookings_read.py); `upper(during) > lo` starts the probe of
# ix_reservation_gpus_host_end past the host's ended bookings.
_BOOKINGS_OF_SPANS = """
    SELECT rg.workspace_id, rg.gpu_id, rg.reservation_id, lower(rg.during), upper(rg.during),
           (SELECT r.linux_users FROM reservations r
            WHERE r.workspace_id = rg.workspace_id AND r.id = rg.reservation_id)
    FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[], %s::timestamptz[])
         AS s(ws, host_id, lo, hi)
    {widen}
    CROSS JOIN LATERAL (
        SELECT * FROM reservation_gpus rg
        WHERE rg.workspace_id = s.ws AND rg.host_id = s.host_id
          AND upper(rg.during) > s.lo - {gap} AND lower(rg.during) <= s.hi + {gap}
        OFFSET 0
    ) AS rg
"""
_BOOKINGS = _BOOKINGS_OF_SPANS.format(widen="", gap="interval '0'")


def _span_arrays(spans: Sequence[HostSpan]) -> list[str]:
    return [
        int_array(s.workspace_id for s in spans),
        int_array(s.host_id for s in spans),
        text_array(s.lo.isoformat() for s in spans),
        text_array(s.hi.isoformat() for s in spans),
    ]


def _delta_of(rows: Sequence[tuple[Any, ...]]) -> ReservationDelta:
    delta = ReservationDelta()
    seen: set[tuple[int, int]] = set()
    for ws, gpu_id, reservation_id, start, end, users in rows:
        if (reservation_id, gpu_id) in seen:  # two spans of one host may both find it
            continue
        seen.add((reservation_id, gpu_id))
        delta.add_booking(
            Booking(ws, reservation_id, gpu_id, to_us(start), to_us(end), frozenset(users))
        )
    return delta


async def load_bookings(
    conn: psycopg.AsyncConnection[Any], spans: Sequence[HostSpan]
) -> ReservationDelta:
    """A delta that knows the bookings touching the spans (one indexed query)."""
    if not spans:
        return ReservationDelta()
    cur = await conn.execute(_BOOKINGS, _span_arrays(spans))
    return _delta_of(await cur.fetchall())


# The ingest batch's read of its bookings, sent in the round trip of its host lock. The
# hosts are locked by a statement of its own first: a statement reads with the snapshot
# it started with, so only a read that starts once the locks are held sees every booking
# committed before them (a booking change holds the same lock while it re-credits).
_LOCK_BATCH_HOSTS = """
    SELECT 1 FROM hosts h
    WHERE (h.workspace_id, h.id) IN (SELECT * FROM unnest(%s::bigint[], %s::bigint[]))
    ORDER BY h.workspace_id, h.id FOR UPDATE OF h
"""
# Any interval a new point opens, closes or splits is at most maxSampleGap long (a longer
# one counts for nobody), so it lies within the batch's times widened by the widest
# limit the workspace ever had (board.rollups.gaps).
_BATCH_BOOKINGS = _BOOKINGS_OF_SPANS.format(
    widen=(
        "JOIN workspaces w ON w.id = s.ws "
        f"CROSS JOIN LATERAL (SELECT make_interval(secs => {WIDEST_SQL}) AS gap) AS wg"
    ),
    gap="wg.gap",
)


class PendingBookings:
    """The bookings of an ingest batch, asked for in its lock's round trip."""

    def __init__(self, cursor: psycopg.AsyncCursor[Any] | None) -> None:
        self._cursor = cursor

    async def delta(self) -> ReservationDelta:
        """A delta that knows them (their rows arrived with the lock's)."""
        if self._cursor is None:
            return ReservationDelta()
        return _delta_of(await self._cursor.fetchall())


async def ask_batch_bookings(
    conn: psycopg.AsyncConnection[Any], spans: Sequence[HostSpan]
) -> PendingBookings:
    """Send (in the caller's pipeline, before its host lock) the lock and the bookings
    read of each host's [first, last] new observation; fetch nothing yet.

    `spans` in (workspace_id, host_id) order, as every host lock is taken.
    """
    if not spans:
        return PendingBookings(None)
    await conn.execute(
        _LOCK_BATCH_HOSTS,
        [int_array(s.workspace_id for s in spans), int_array(s.host_id for s in spans)],
    )
    return PendingBookings(await conn.execute(_BATCH_BOOKINGS, _span_arrays(spans)))


_UPSERT_FIGURES = """
    INSERT INTO reservation_hour_figures AS f (workspace_id, reservation_id, gpu_id,
        hour_start, covered_us, used_us, idle_held_us, conflict_us, unused_us)
    SELECT ws, reservation_id, gpu_id, to_timestamp(hour * 3600), covered_us, used_us,
           idle_held_us, conflict_us, unused_us
    FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],
                %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[])
         AS d(ws, reservation_id, gpu_id, hour, covered_us, used_us, idle_held_us,
              conflict_us, unused_us)
    ON CONFLICT (workspace_id, reservation_id, gpu_id, hour_start) DO UPDATE SET
        covered_us = f.covered_us + EXCLUDED.covered_us,
        used_us = f.used_us + EXCLUDED.used_us,
        idle_held_us = f.idle_held_us + EXCLUDED.idle_held_us,
        conflict_us = f.conflict_us + EXCLUDED.conflict_us,
        unused_us = f.unused_us + EXCLUDED.unused_us
"""


async def upsert_figures(conn: psycopg.AsyncConnection[Any], delta: ReservationDelta) -> None:
    """Add the delta's partial-hour figures to reservation_hour_figures, in key order
    (concurrent upserts never deadlock). Its `booked` hours go with the GPU-hour upsert:
    ingest's own (board.ingest.store), or `write_figures`."""
    rows = [
        (delta.workspace_of[reservation], reservation, gpu, hour // HOUR_US, *sums)
        for (reservation, gpu, hour), sums in sorted(delta.figures.items())
        if any(sums)
    ]
    if rows:
        await conn.execute(_UPSERT_FIGURES, [bigint_array(c) for c in zip(*rows, strict=True)])


async def write_figures(
    conn: psycopg.AsyncConnection[Any], delta: ReservationDelta, workspace_of_host: dict[int, int]
) -> None:
    """Both kinds of a delta's figures (a booking change, a rebuild): the hours wholly
    inside a booking added to their GPU-hour rows' booked sums, the rest as figure rows.

    The GPU-hour row exists wherever an interval was credited; the upsert would create
    it (with zero rollup sums) were it ever missing, so no figure is lost.
    """
    if delta.booked:
        await upsert_rollup_delta(conn, workspace_of_host, RollupDelta(), delta.booked)
    await upsert_figures(conn, delta)
