"""Job figures per UTC day: the hourly job figures summed, so a month's jobs report reads
about 24 times fewer rows (docs/jobs.md "Day rows").

The same scheme as the rollups' day rows (board.rollups.daily), with marks of its own: a
statement-level trigger on job_hour_figures (migration "job day figures"), and one on
the GPU-hour rows for those holding a run's whole hours (migration "job hours on GPU
rows"), mark every UTC day whose hours a statement touched in job_dirty_days, in the
same transaction, whatever wrote them (ingest, a record's re-crediting, a rebuild, a
cascade). Day rows are summed from both (the view job_hours). A job
figure change leaves the GPU-hour rollups alone (board.jobs.recredit), so the rollups'
marks could not say it. The jobs report reads hours for marked days and day rows for
the others; `refresh_job_days` (the maintenance schedule) recomputes closed marked days
from their hours and clears the marks.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from board.hosts.locks import lock_hosts

log = logging.getLogger(__name__)

# Serializes refreshes of job day rows across board processes.
JOB_DAYS_LOCK_KEY = 0x6775615F6A646179  # "gua_jday"
# Days recomputed per transaction (the workspace's hosts stay locked for it), and at
# most per workspace and run: a rebuild that marked a year waits for later runs, its
# days read from hours meanwhile.
DAYS_PER_TRANSACTION = 7
DAYS_PER_RUN = 56

FIGURE_SUMS = (
    "covered_us",
    "active_us",
    "idle_held_us",
    "foreign_us",
    "unused_us",
    "util_pct_us",
)


async def refresh_job_days(
    conn: psycopg.AsyncConnection[Any],
    now: datetime | None = None,
    *,
    days_per_run: int = DAYS_PER_RUN,
) -> int:
    """Recompute the day rows of closed, marked UTC days from their hours; clear the marks.

    At most `days_per_run` days per workspace, oldest first, a week per transaction
    holding the workspace's host locks (in key order, like ingest, re-crediting and
    rebuild), so no job figure write of that workspace is in flight while its hours are
    read; one that lands afterwards marks its day again. Idempotent: a day's rows are
    replaced, not added to. Runs on a connection in autocommit mode. Returns the number
    of days recomputed.
    """
    now = now or datetime.now(UTC)
    cur = await conn.execute(
        "SELECT DISTINCT workspace_id FROM job_dirty_days "
        "WHERE day_start <= %s - interval '1 day' ORDER BY 1",
        [now],
    )
    done = 0
    for (ws,) in await cur.fetchall():
        left = days_per_run
        while left > 0:
            days = await _refresh_some(conn, int(ws), now, min(left, DAYS_PER_TRANSACTION))
            if not days:
                break
            done += days
            left -= days
    if done:
        log.info("job day figures: refreshed %d day(s)", done)
    return done


async def _refresh_some(
    conn: psycopg.AsyncConnection[Any], ws: int, now: datetime, limit: int
) -> int:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", [JOB_DAYS_LOCK_KEY])
        await lock_hosts(conn, "h.id", "h.workspace_id = %s", [ws])
        # The marks go first: a write racing in (from a host enrolled after the lock
        # above) finds its day's mark being deleted, waits for this commit and re-marks.
        cur = await conn.execute(
            """
            DELETE FROM job_dirty_days
            WHERE workspace_id = %(ws)s AND day_start IN (
                SELECT day_start FROM job_dirty_days
                WHERE workspace_id = %(ws)s AND day_start <= %(now)s - interval '1 day'
                ORDER BY day_start LIMIT %(limit)s)
            RETURNING day_start
            """,
            {"ws": ws, "now": now, "limit": limit},
        )
        days = sorted(r[0] for r in await cur.fetchall())
        if days:
            for statement in _REFRESH:
                await conn.execute(statement, {"ws": ws, "days": days})
    return len(days)


_SUMS = ", ".join(FIGURE_SUMS)
_SUMMED = ", ".join(f"sum(h.{c})" for c in FIGURE_SUMS)
_REFRESH = (
    "DELETE FROM job_day_figures WHERE workspace_id = %(ws)s AND day_start = ANY(%(days)s)",
    f"""
    INSERT INTO job_day_figures (workspace_id, job_id, gpu_id, day_start, host_id, {_SUMS},
        max_memory_used_mb)
    SELECT h.workspace_id, h.job_id, h.gpu_id, d.day, max(h.host_id), {_SUMMED},
           max(h.max_memory_used_mb)
    FROM job_hours h
    JOIN unnest(%(days)s::timestamptz[]) AS d(day)
      ON h.hour_start >= d.day AND h.hour_start < d.day + interval '1 day'
    WHERE h.workspace_id = %(ws)s
    GROUP BY h.workspace_id, h.job_id, h.gpu_id, d.day
    """,
)


async def dirty_job_days(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, d0: datetime, d1: datetime
) -> tuple[datetime, ...]:
    """The UTC days in [d0, d1) whose day rows are stale: read from their hours."""
    if d0 >= d1:
        return ()
    cur = await conn.execute(
        "SELECT day_start FROM job_dirty_days "
        "WHERE workspace_id = %s AND day_start >= %s AND day_start < %s ORDER BY 1",
        [workspace_id, d0, d1],
    )
    return tuple(row[0] for row in await cur.fetchall())


def hour_ranges(
    start: datetime, end: datetime, d0: datetime, d1: datetime, dirty: tuple[datetime, ...]
) -> list[tuple[datetime, datetime]]:
    """What of [start, end) is read from hour rows when day rows serve the whole UTC days
    [d0, d1) but the `dirty` ones: [lo, hi) ranges, in order, merged where they touch."""
    day = timedelta(days=1)
    pieces = [(start, d0), *((d, d + day) for d in dirty), (d1, end)]
    merged: list[tuple[datetime, datetime]] = []
    for lo, hi in sorted(p for p in pieces if p[0] < p[1]):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged
