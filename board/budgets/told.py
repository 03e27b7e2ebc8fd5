"""Which budget notices were told, and when a workspace's budgets were last looked at.

The notices package decides and sends (board/notices/budget_watch.py); these tables are
the budgets' own, so the SQL on them stays here.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg


async def check_due(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, now: datetime, every: timedelta
) -> bool:
    """Whether the workspace's budgets are due a look (none for `every`); if so, the look
    is taken now, in the caller's transaction (a look that fails is not counted)."""
    cur = await conn.execute(
        """
        INSERT INTO budget_checks (workspace_id, checked_at) VALUES (%(ws)s, %(now)s)
        ON CONFLICT (workspace_id) DO UPDATE SET checked_at = EXCLUDED.checked_at
        WHERE budget_checks.checked_at <= EXCLUDED.checked_at - %(every)s
        RETURNING 1
        """,
        {"ws": workspace_id, "now": now, "every": every},
    )
    return await cur.fetchone() is not None


async def look_again(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> None:
    """The next pass looks at the workspace's budgets (one was just set)."""
    await conn.execute("DELETE FROM budget_checks WHERE workspace_id = %s", [workspace_id])


async def claim(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    team: str,
    period: str,
    kinds: Sequence[str],
    now: datetime,
) -> list[str]:
    """Of `kinds` ("warning", "exceeded"), those not yet told for the team and period,
    now taken (the key makes each at most once, whichever process looks)."""
    taken = []
    for kind in kinds:
        cur = await conn.execute(
            """
            INSERT INTO budget_notices (workspace_id, team, period, kind, event_id, told_at)
            VALUES (%s, %s, %s, %s, gen_random_uuid(), %s)
            ON CONFLICT DO NOTHING RETURNING kind
            """,
            [workspace_id, team, period, kind, now],
        )
        if await cur.fetchone() is not None:
            taken.append(kind)
    return taken


async def name_event(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    team: str,
    period: str,
    kinds: Sequence[str],
    event_id: uuid.UUID,
) -> None:
    """The notice that told the claimed kinds."""
    await conn.execute(
        "UPDATE budget_notices SET event_id = %s "
        "WHERE workspace_id = %s AND team = %s AND period = %s AND kind = ANY(%s)",
        [event_id, workspace_id, team, period, list(kinds)],
    )
