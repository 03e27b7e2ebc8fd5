"""Job figure retention: the hours of job figures and of time outside jobs go when the
rollup hours beside them do (board.rollups.retention: older than the workspace's
retentionDays, and never before the operator's floor).

A run's whole hours are kept on the GPU-hour rows (board.jobs.crediting), which the
rollups' retention deletes; its partial and shared hours here must go with them, or the
day refresh (board.jobs.days), which the deleted rows mark, would rebuild a day from
half its hours.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg

_TABLES = ("job_hour_figures", "outside_job_hours")


async def drop_expired_job_hours(
    conn: psycopg.AsyncConnection[Any], *, min_days: int, now: datetime | None = None
) -> int:
    """Delete the job hours that ended more than the workspace's retention_days ago, and
    at least `min_days` ago whatever the workspace says; the rows deleted."""
    now = now or datetime.now(UTC)
    deleted = 0
    async with conn.transaction():
        for table in _TABLES:
            # The rollups' cutoff, on hour_start alone so the (workspace_id, hour_start)
            # index serves it.
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
            deleted += cur.rowcount
    return deleted
