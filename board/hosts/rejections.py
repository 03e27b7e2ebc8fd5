"""Counting rejected pushes per host and reason, by hour, so admins see a broken agent."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

# A detail is shown on the host page and in the API: a sentence, not the payload.
MAX_DETAIL_CHARS = 500


def safe_text(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """`text` as PostgreSQL and JSON can hold it, at most `limit` characters.

    A detail may quote what an agent sent (an unknown key, say): NUL is written as the
    six characters \\u0000 (PostgreSQL text cannot hold NUL) and a lone surrogate as
    its escape (it cannot be encoded as UTF-8), then the text is cut to the limit.
    """
    if "\x00" in text:
        text = text.replace("\x00", "\\u0000")
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
            [workspace_id, host_id, safe_text(reason, 64), at, at, safe_text(detail)],
        )
