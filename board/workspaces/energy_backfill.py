"""Energy for the history recorded before the board counted it.

The migration "energy in rollups" marks each workspace with `energy_backfill_until`:
hours before it were credited without energy. While raw samples of those hours remain,
they are replayed (board.reservations.rebuild.rebuild_hours: the rollups and booking
figures, exactly as ingest credits them, power included), one UTC day per transaction
and newest first, so the recent weeks people look at gain their energy first and a
transaction holds the hosts' locks for one day's replay only. The mark moves back with
each day and is cleared once the raw history is exhausted; older hours keep
energyCoveredHours 0, which the reports show as such.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import psycopg

from board.hosts.locks import lock_hosts
from board.reservations.rebuild import rebuild_hours
from board.rollups.rebuild import rebuildable_from

log = logging.getLogger(__name__)

DAY = timedelta(days=1)


async def backfill_energy(conn: psycopg.AsyncConnection[Any]) -> int:
    """Replay every marked workspace's raw days until none is left; the days replayed.

    Runs on a connection in autocommit mode (each day commits on its own).
    """
    cur = await conn.execute(
        "SELECT id FROM workspaces WHERE energy_backfill_until IS NOT NULL ORDER BY id"
    )
    done = 0
    for (workspace_id,) in await cur.fetchall():
        while await _backfill_one_day(conn, int(workspace_id)):
            done += 1
    if done:
        log.info("energy: back-filled %d day(s) from raw samples", done)
    return done


async def _backfill_one_day(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> bool:
    """The newest marked day of one workspace; False once nothing is left to replay."""
    async with conn.transaction():
        # The hosts first, then the workspace row: the order a maxSampleGap change takes.
        await lock_hosts(conn, "h.id", "h.workspace_id = %s", [workspace_id])
        cur = await conn.execute(
            "SELECT energy_backfill_until FROM workspaces WHERE id = %s FOR UPDATE",
            [workspace_id],
        )
        row = await cur.fetchone()
        until: datetime | None = row[0] if row is not None else None
        if until is None:
            return False
        oldest = await rebuildable_from(conn, workspace_id)
        if oldest is None or until <= oldest:
            await _mark(conn, workspace_id, None)
            return False
        begin = max(oldest, until - DAY)
        await rebuild_hours(conn, workspace_id, begin, until)
        await _mark(conn, workspace_id, begin if begin > oldest else None)
    return True


async def _mark(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, until: datetime | None
) -> None:
    await conn.execute(
        "UPDATE workspaces SET energy_backfill_until = %s WHERE id = %s", [until, workspace_id]
    )
