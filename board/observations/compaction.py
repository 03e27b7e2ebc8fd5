"""Compaction of closed days: each host's hot rows become one row per hour.

A closed day's `host_observations` rows of one host are moved, in one transaction
under the host's lock (the lock every ingest batch takes), into `observation_hours`:
one row per host and UTC hour holding the hour's observations, in time order, as an
array of the composite type `observation_record`, which TOAST compresses (lz4 where the
server has it). Consecutive observations of a host repeat most of their bytes (GPU ids,
states, users, process names), which is what makes the row a small fraction of the
hot rows it replaces (ADR 0010, docs/benchmarks.md).

A late observation for a compacted hour lands in the hot table like any other; the next
run merges it into its hour's row. Readers see both through `raw_observations(…)`, so
the move is invisible to them: each of their statements sees the host's rows before or
after a move, never half of it. Once a day's hot partition is empty, it is truncated to
give its pages back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from board.hosts.locks import lock_hosts
from board.observations.maintenance import MAINTENANCE_LOCK_KEY, existing_partitions, partition_name

log = logging.getLogger(__name__)

# A day is compacted once it has been over this long (late points mostly come sooner).
DEFAULT_GRACE = timedelta(hours=1)

# The fields of one observation: host_observations' columns after workspace_id and
# host_id, in the order of the composite type (tests/board/test_compaction.py holds the
# three equal).
RECORD_FIELDS = (
    "observed_at",
    "received_at",
    "collection_status",
    "errors",
    "agent_version",
    "driver_version",
    "gpu_id",
    "gpu_index",
    "gpu_util_pct",
    "gpu_memory_used_mb",
    "gpu_memory_total_mb",
    "gpu_temperature_c",
    "gpu_power_w",
    "gpu_reported_state",
    "gpu_state",
    "process_gpu_id",
    "process_pid",
    "process_user",
    "process_name",
    "process_type",
    "process_memory_mb",
    "process_job_id",
)
_RECORD = ", ".join(f"o.{f}" for f in RECORD_FIELDS)

_MOVE = f"""
    WITH moved AS (
        DELETE FROM host_observations o
        WHERE o.workspace_id = %(ws)s AND o.host_id = %(host)s
          AND o.observed_at >= %(start)s AND o.observed_at < %(end)s
        RETURNING o.*
    ), hours AS (
        SELECT to_timestamp(floor(extract(epoch FROM o.observed_at) / 3600) * 3600) AS hour_start,
               min(o.observed_at) AS first_at, max(o.observed_at) AS last_at,
               array_agg(o.observed_at ORDER BY o.observed_at) AS observed_ats,
               array_agg(ROW({_RECORD})::observation_record ORDER BY o.observed_at) AS records
        FROM moved o
        GROUP BY 1
    ), written AS (
        INSERT INTO observation_hours AS c (workspace_id, host_id, hour_start, first_at,
            last_at, observed_ats, records)
        SELECT %(ws)s, %(host)s, hour_start, first_at, last_at, observed_ats, records
        FROM hours
        -- An hour compacted before: merge the late points into it, in time order.
        ON CONFLICT (workspace_id, host_id, hour_start) DO UPDATE SET
            first_at = least(c.first_at, EXCLUDED.first_at),
            last_at = greatest(c.last_at, EXCLUDED.last_at),
            observed_ats = (SELECT array_agg(t ORDER BY t)
                            FROM unnest(c.observed_ats || EXCLUDED.observed_ats) t),
            records = (SELECT array_agg(r ORDER BY r.observed_at)
                       FROM unnest(c.records || EXCLUDED.records) r)
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM written)
"""


@dataclass
class CompactionResult:
    days: list[date]
    observations: int = 0
    hours: int = 0
    truncated: int = 0


def closed_days(partition_days: set[date], now: datetime, grace: timedelta) -> list[date]:
    """The days over for at least `grace` at `now`, oldest first."""
    return sorted(
        day
        for day in partition_days
        if datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1) + grace <= now
    )


async def compact_day(
    conn: psycopg.AsyncConnection[Any], day: date, result: CompactionResult
) -> None:
    """Move the day's hot rows into hour rows, host by host (autocommit `conn`)."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    end = start + timedelta(days=1)
    cur = await conn.execute(
        "SELECT DISTINCT workspace_id, host_id FROM host_observations "
        "WHERE observed_at >= %s AND observed_at < %s ORDER BY 1, 2",
        [start, end],
    )
    for workspace_id, host_id in await cur.fetchall():
        async with conn.transaction():
            # The host's ingest batches wait while its rows move (a deleted host has
            # no row to lock, and no batch either).
            await lock_hosts(
                conn, "h.id", "h.workspace_id = %s AND h.id = %s", [workspace_id, host_id]
            )
            cur = await conn.execute(
                _MOVE, {"ws": workspace_id, "host": host_id, "start": start, "end": end}
            )
            row = await cur.fetchone()
            assert row is not None
            result.observations += int(row[0])
            result.hours += int(row[1])
    if await _truncate_if_empty(conn, day):
        result.truncated += 1


async def _truncate_if_empty(conn: psycopg.AsyncConnection[Any], day: date) -> bool:
    """Give the emptied partition's pages back, unless a late row landed meanwhile.

    The exclusive lock keeps inserts out between the check and the TRUNCATE; it is
    given up, to try again next run, rather than queue every reader behind it.
    """
    child = sql.Identifier(partition_name("host_observations", day))
    try:
        async with conn.transaction():
            # Waiting for the lock queues readers of every day behind it (a cached plan
            # locks all partitions), so wait briefly and otherwise try next run.
            await conn.execute("SET LOCAL lock_timeout = '200ms'")
            await conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(child))
            cur = await conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(child))
            row = await cur.fetchone()
            if row is None or row[0]:
                return False
            await conn.execute(sql.SQL("TRUNCATE {}").format(child))
            return True
    except psycopg.errors.LockNotAvailable:
        log.info("compaction: %s busy; its pages are given back next run", child.as_string())
        return False


async def compact_closed_days(
    conn: psycopg.AsyncConnection[Any],
    *,
    now: datetime | None = None,
    grace: timedelta = DEFAULT_GRACE,
) -> CompactionResult:
    """Compact every closed day that still has hot rows (`conn` in autocommit mode).

    Takes the partition maintenance lock, so a day's partition is not dropped by
    retention while its rows are being moved.
    """
    now = now or datetime.now(UTC)
    have = await existing_partitions(conn)
    result = CompactionResult(days=[])
    cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", [MAINTENANCE_LOCK_KEY])
    row = await cur.fetchone()
    if not row or not row[0]:
        log.info("compaction: partition maintenance is running elsewhere; next run")
        return result
    try:
        for day in closed_days(have["host_observations"], now, grace):
            child = sql.Identifier(partition_name("host_observations", day))
            cur = await conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(child))
            row = await cur.fetchone()
            if row is None or not row[0]:
                continue
            await compact_day(conn, day, result)
            result.days.append(day)
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", [MAINTENANCE_LOCK_KEY])
    if result.days:
        log.info(
            "compaction: %d observations of %d days into %d host hours",
            result.observations,
            len(result.days),
            result.hours,
        )
    return result
