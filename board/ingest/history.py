"""What a batch reads of the stored raw history: only for late points and lost ticks.

The normal point is newer than its host's newest observation and reads nothing here.
A late or repeated one needs to know whether it is stored already and between which
stored observations it lands; an interval whose opener is not the tick on the host row
needs that opener read back from the raw samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import psycopg

from board.rollups.crediting import Tick, gpu_ticks, to_us


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
                         AND o.observed_at = p.t)
               OR EXISTS (SELECT 1 FROM observation_hours c
                          WHERE c.workspace_id = p.ws AND c.host_id = p.host_id
                            AND c.hour_start > p.t - interval '1 hour'
                            AND c.hour_start <= p.t AND p.t = ANY (c.observed_ats)),
               greatest(
                   (SELECT max(o.observed_at) FROM host_observations o
                    WHERE o.workspace_id = p.ws AND o.host_id = p.host_id
                      AND o.observed_at < p.t),
                   -- The last compacted hour that starts before t holds the newest
                   -- compacted time before it, if any.
                   (SELECT max(x)
                    FROM (SELECT c.observed_ats FROM observation_hours c
                          WHERE c.workspace_id = p.ws AND c.host_id = p.host_id
                            AND c.hour_start < p.t AND c.first_at < p.t
                          ORDER BY c.hour_start DESC LIMIT 1) s
                    CROSS JOIN LATERAL unnest(s.observed_ats) x
                    WHERE x < p.t)),
               least(
                   (SELECT min(o.observed_at) FROM host_observations o
                    WHERE o.workspace_id = p.ws AND o.host_id = p.host_id
                      AND o.observed_at > p.t),
                   (SELECT min(x)
                    FROM (SELECT c.observed_ats FROM observation_hours c
                          WHERE c.workspace_id = p.ws AND c.host_id = p.host_id
                            AND c.hour_start > p.t - interval '1 hour' AND c.last_at > p.t
                          ORDER BY c.hour_start LIMIT 1) s
                    CROSS JOIN LATERAL unnest(s.observed_ats) x
                    WHERE x > p.t))
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
    """Stored observations as ticks (GPU state, compute holders, power), keyed by host and
    time."""
    if not keys:
        return {}
    cur = await conn.execute(
        """
        SELECT k.host_id, k.t, r.gpu_id, r.gpu_state, r.gpu_util_pct, r.gpu_memory_used_mb,
               r.gpu_memory_total_mb, r.process_gpu_id, r.process_user, r.process_type,
               r.gpu_power_w, r.process_job_id
        FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[]) AS k(ws, host_id, t)
        CROSS JOIN LATERAL raw_observations(k.ws, k.host_id, k.t, k.t) r
        """,
        [
            [k.workspace_id for k in keys],
            [k.host_id for k in keys],
            [k.observed_at for k in keys],
        ],
    )
    return {
        (host_id, t): Tick(host_id, to_us(t), gpu_ticks(*arrays))
        for host_id, t, *arrays in await cur.fetchall()
    }
