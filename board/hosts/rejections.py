"""Counting rejected pushes per host and reason, by hour, so admins see a broken agent."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool


async def record_rejection(
    pool: AsyncConnectionPool[Any],
    workspace_id: int,
    host_id: int,
    reason: str,
    detail: str,
    at: datetime,
) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            """
            INSERT INTO host_rejections AS r
                (workspace_id, host_id, reason, hour_start, count, last_at, last_detail)
            VALUES (%s, %s, %s, date_trunc('hour', %s::timestamptz), 1, %s, %s)
            ON CONFLICT (workspace_id, host_id, reason, hour_start) DO UPDATE
                SET count = r.count + 1, last_at = EXCLUDED.last_at,
                    last_detail = EXCLUDED.last_detail
            """,
            [workspace_id, host_id, reason, at, at, detail[:500]],
        )
