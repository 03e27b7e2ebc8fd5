"""Rollup retention: hourly rollups (per GPU, host and user) and reservation figures older
than a workspace's retentionDays, and never before the operator's floor
(GUA_BOARD_MIN_RETENTION_DAYS), are deleted: they are what finance bills from.

Their days are marked dirty by the trigger and recomputed (to nothing) by
board.rollups.daily.refresh_day_rollups, which the schedule runs right after. Separate
from the raw partitions (board.observations), which follow the server-wide raw
retention and are dropped whole without ever touching a rollup.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from board.rollups.daily import DAY_ROLLUP_LOCK_KEY

log = logging.getLogger(__name__)


@dataclass
class RetentionResult:
    gpu_rows: int = 0
    user_rows: int = 0
    host_rows: int = 0
    figure_rows: int = 0  # reservation_hour_figures (a booking's partial hours)


async def drop_expired_rollups(
    conn: psycopg.AsyncConnection[Any], *, min_days: int, now: datetime | None = None
) -> RetentionResult:
    """Delete every rollup hour that ended more than the workspace's retention_days ago,
    and at least `min_days` ago whatever the workspace says."""
    now = now or datetime.now(UTC)
    result = RetentionResult()
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", [DAY_ROLLUP_LOCK_KEY])
        await _delete_hours(conn, now, min_days, result)
    if result.gpu_rows or result.user_rows:
        log.info(
            "rollup retention: deleted %d GPU-hour and %d user-hour rows",
            result.gpu_rows,
            result.user_rows,
        )
    return result


async def _delete_hours(
    conn: psycopg.AsyncConnection[Any], now: datetime, min_days: int, result: RetentionResult
) -> None:
    # GPU hours before host hours: the GPU-hour trigger subtracts the deleted rows from
    # their host hours (to zero), and the zeroed host hours are deleted after.
    # The reservation figures of a booking's partial hours go with them: its whole hours
    # are kept in the GPU-hour rows (booked_*), so both kinds of its hours go at once.
    tables = (
        "gpu_hour_rollups",
        "host_hour_rollups",
        "user_hour_rollups",
        "reservation_hour_figures",
    )
    for table in tables:
        # An hour is expired once its end (hour_start + 1 h) is at or before the cutoff;
        # written on hour_start alone so the (workspace_id, hour_start) index serves it.
        # The deleted hours mark their days dirty; refresh_day_rollups redoes those days.
        cur = await conn.execute(
            f"""
            DELETE FROM {table} r
            USING workspaces w
            WHERE r.workspace_id = w.id
              AND r.hour_start
                  <= %(now)s - make_interval(days => GREATEST(w.retention_days, %(floor)s))
                     - interval '1 hour'
            """,
            {"now": now, "floor": min_days},
        )
        if table == "gpu_hour_rollups":
            result.gpu_rows = cur.rowcount
        elif table == "host_hour_rollups":
            result.host_rows = cur.rowcount
        elif table == "user_hour_rollups":
            result.user_rows = cur.rowcount
        else:
            result.figure_rows = cur.rowcount
