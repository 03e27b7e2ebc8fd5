"""What a batch reads of the stored raw history: only for late points and lost ticks.

The normal point is newer than its host's newest observation and reads nothing here.
A late or repeated one needs to know whether it is stored already and between which
stored observations it lands; an interval whose opener is not the tick on the host row
needs that opener read back from the raw samples.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import psycopg

from board.rollups.crediting import GpuTick, Tick, compute_holders, to_us


class RawKey(NamedTuple):
    """An observation's key in the raw tables."""

    workspace_id: int
    host_id: int
    observed_at: datetime


# (host_id, observed_at): host ids come from one identity, unique across workspaces.
PointKey = tuple[int, datetime]


class Neighbourhood(NamedTuple):
    """A late point's place among its host's stored observations."""

    stored: bool  # this very time is stored already
    before: datetime | None  # the stored observation just before it
    after: datetime | None  # and the one just after it


async def neighbourhoods(
    conn: psycopg.AsyncConnection[Any], points: Sequence[RawKey]
) -> dict[PointKey, Neighbourhood]:
    cur = await conn.execute(
        """
        SELECT p.host_id, p.t,
               EXISTS (SELECT 1 FROM host_observations o
                       WHERE o.workspace_id = p.ws AND o.host_id = p.host_id
                         AND o.observed_at = p.t),
               (SELECT max(o.observed_at) FROM host_observations o
                WHERE o.workspace_id = p.ws AND o.host_id = p.host_id AND o.observed_at < p.t),
               (SELECT min(o.observed_at) FROM host_observations o
                WHERE o.workspace_id = p.ws AND o.host_id = p.host_id AND o.observed_at > p.t)
        FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[]) AS p(ws, host_id, t)
        """,
        [
            [p.workspace_id for p in points],
            [p.host_id for p in points],
            [p.observed_at for p in points],
        ],
    )
    return {
        (host_id, t): Neighbourhood(stored, before, after)
        for host_id, t, stored, before, after in await cur.fetchall()
    }


async def load_ticks(
    conn: psycopg.AsyncConnection[Any], keys: Sequence[RawKey]
) -> dict[PointKey, Tick]:
    """Stored observations as ticks (GPU state and compute holders), keyed by host and time."""
    if not keys:
        return {}
    cur = await conn.execute(
        """
        SELECT k.host_id, k.t, g.gpu_id, g.state, g.util_pct, g.memory_used_mb,
               g.memory_total_mb,
               (SELECT coalesce(array_agg(DISTINCT ps.linux_user), '{}')
                FROM process_samples ps
                WHERE ps.workspace_id = k.ws AND ps.host_id = k.host_id
                  AND ps.observed_at = k.t AND ps.gpu_id = g.gpu_id AND ps.type = 'compute')
        FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[]) AS k(ws, host_id, t)
        LEFT JOIN gpu_samples g
               ON g.workspace_id = k.ws AND g.host_id = k.host_id AND g.observed_at = k.t
        ORDER BY k.host_id, k.t, g.gpu_id
        """,
        [
            [k.workspace_id for k in keys],
            [k.host_id for k in keys],
            [k.observed_at for k in keys],
        ],
    )
    gpus: dict[PointKey, list[GpuTick]] = defaultdict(list)
    for host_id, t, gpu_id, state, util, mem, total, users in await cur.fetchall():
        bucket = gpus[(host_id, t)]
        if gpu_id is not None:  # an error heartbeat has no GPU rows
            holders = compute_holders((u, "compute") for u in users)
            bucket.append(GpuTick(gpu_id, state, util, mem, total, holders))
    return {
        (host_id, t): Tick(host_id=host_id, observed_us=to_us(t), gpus=tuple(ticks))
        for (host_id, t), ticks in gpus.items()
    }
