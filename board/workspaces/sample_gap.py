"""A change of maxSampleGap: dated, and re-judging exactly the intervals it covers.

A new value holds from its `from` (default: now) on, superseding any value dated at or
after it (a change made today and meant since Monday is simply made again, from Monday).
Intervals opened before `from` keep the value they were judged by; those opened at or after it are
re-judged by replaying the raw samples of the hours from `from` on through the same
crediting the ingest path uses (board.rollups.rebuild, board.reservations.rebuild), in
the transaction that records the change, with the workspace's hosts locked first as
ingest locks them: no batch interleaves, and no figure is counted twice or taken back
under a limit it was not credited with.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from board.errors import Conflict, Unprocessable
from board.hosts.locks import lock_hosts
from board.reservations.rebuild import rebuild_hours
from board.rollups.rebuild import rebuildable_from

HOUR = timedelta(hours=1)
# A history this long is a script gone wrong, not a lab: every ingest batch reads it.
MAX_CHANGES = 200


def _floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


async def change_sample_gap(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    seconds: int,
    from_: datetime | None,
    now: datetime,
) -> int:
    """Record `seconds` in force from `from_` (None: now) and re-judge what it covers;
    the value in force before, as read under the lock.

    Runs in the caller's transaction (which commits it with the rest of the request).
    """
    await lock_hosts(conn, "h.id", "h.workspace_id = %s", [workspace_id])
    # A statement of its own, after the host locks: it sees any change committed meanwhile.
    cur = await conn.execute(
        "SELECT sample_gap_from, sample_gap_seconds FROM workspaces WHERE id = %s FOR UPDATE",
        [workspace_id],
    )
    row = await cur.fetchone()
    assert row is not None  # the request's workspace
    froms: list[datetime | None] = list(row[0])
    values: list[int] = list(row[1])
    previous = values[-1]
    start = now if from_ is None else from_.astimezone(UTC)
    if start > now:
        raise Unprocessable("maxSampleGapFrom must not be in the future.")
    # The new value holds from `start` on: values dated at or after it are superseded.
    kept = [(f, v) for f, v in zip(froms, values, strict=True) if f is None or f < start]
    if kept[-1][1] != seconds:
        kept.append((start, seconds))
    if kept == list(zip(froms, values, strict=True)):
        return previous  # the value in force from `start` on already: nothing changes
    if len(kept) > MAX_CHANGES:
        raise Conflict(f"maxSampleGapSeconds keeps at most {MAX_CHANGES} dated values.")
    froms, values = [f for f, _ in kept], [v for _, v in kept]
    await _refuse_unrebuildable(conn, workspace_id, start)
    await conn.execute(
        "UPDATE workspaces SET sample_gap_from = %s, sample_gap_seconds = %s, "
        "max_sample_gap_seconds = %s WHERE id = %s",
        [froms, values, values[-1], workspace_id],
    )
    await _rejudge(conn, workspace_id, start)
    return previous


async def _refuse_unrebuildable(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, start: datetime
) -> None:
    """A back-dated change may reach only as far back as the raw samples can re-judge."""
    oldest = await rebuildable_from(conn, workspace_id)
    cur = await conn.execute(
        "SELECT EXISTS (SELECT FROM gpu_hour_rollups WHERE workspace_id = %s "
        "AND hour_start >= %s AND (%s::timestamptz IS NULL OR hour_start < %s))",
        [workspace_id, _floor_hour(start), oldest, oldest],
    )
    row = await cur.fetchone()
    if row is not None and row[0]:
        since = f" (kept from {oldest.isoformat()})" if oldest is not None else ""
        raise Conflict(
            "maxSampleGapFrom reaches hours whose raw samples are gone"
            f"{since}, so they could not be re-judged: choose a later time."
        )


async def _rejudge(conn: psycopg.AsyncConnection[Any], workspace_id: int, start: datetime) -> None:
    """Rebuild the rollups and reservation figures of the hours from `start`'s on, when
    any observation at or after `start` can open an interval the change judges."""
    # Hosts enrolled since the first lock are locked too before the newest observation is
    # read: one could otherwise commit, between that read and the rebuild, intervals after
    # it judged by the old value and outside the window. No host is enrolled from here
    # on (its row's foreign key waits for the workspace row this transaction holds).
    await lock_hosts(conn, "h.id", "h.workspace_id = %s", [workspace_id])
    cur = await conn.execute(
        """
        SELECT greatest(
            (SELECT max(observed_at) FROM host_observations WHERE workspace_id = %(ws)s),
            (SELECT max(last_at) FROM observation_hours WHERE workspace_id = %(ws)s))
        """,
        {"ws": workspace_id},
    )
    row = await cur.fetchone()
    newest = row[0] if row is not None else None
    if newest is None or newest < start:
        return
    begin, end = _floor_hour(start), _floor_hour(newest) + HOUR
    await rebuild_hours(conn, workspace_id, begin, end)
