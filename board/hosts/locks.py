"""Host rows are locked in one order, (workspace_id, id), by every writer of rollups.

The ingest batch, the rollup rebuild and the day-rollup refresh each lock the hosts
whose rollups they touch before touching them. Taking those locks in key order means
two of them never deadlock, and that no rollup write of a host is in flight while
another reads or replaces its hours.
"""

from __future__ import annotations

from typing import Any

import psycopg


async def lock_hosts(
    conn: psycopg.AsyncConnection[Any], columns: str, where: str, params: Any
) -> list[tuple[Any, ...]]:
    """Lock the hosts matching `where` in key order; their `columns`, in that order.

    `columns` and `where` read the host as `h` and its workspace as `w`; only host
    rows are locked. Runs in the caller's transaction.
    """
    cur = await conn.execute(
        f"SELECT {columns} FROM hosts h JOIN workspaces w ON w.id = h.workspace_id "
        f"WHERE {where} ORDER BY h.workspace_id, h.id FOR UPDATE OF h",
        params,
    )
    return await cur.fetchall()
