"""Rebuilding hourly rollups from the raw samples (`gua-board rollups rebuild`).

The replay feeds each host's stored observations, in time order, through the same
RollupDelta crediting the ingest path uses, so a rebuilt hour equals the incremental
one. The boundary observations just outside the window (the one before `from` within
widest maxSampleGap, the first one at or after `to`) are read too, so intervals that cross a
boundary are split exactly as ingest split them; only hours inside the window are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from board.errors import NotFound
from board.hosts.locks import lock_hosts
from board.observations.maintenance import existing_partitions
from board.rollups.crediting import RollupDelta, Tick, gpu_ticks, to_us
from board.rollups.gaps import WIDEST_SQL, load_schedule
from board.rollups.store import upsert_rollup_delta

HOUR = timedelta(hours=1)


@dataclass
class RebuildResult:
    hosts: int = 0
    observations: int = 0
    gpu_rows: int = 0
    user_rows: int = 0

    def add(self, other: RebuildResult) -> None:
        self.hosts = max(self.hosts, other.hosts)
        self.observations += other.observations
        self.gpu_rows += other.gpu_rows
        self.user_rows += other.user_rows


@dataclass(frozen=True, slots=True)
class RawSpan:
    """The hours a workspace's raw samples can still rebuild."""

    workspace_id: int
    oldest: datetime  # the first hour whose rollups can still be recomputed
    newest: datetime  # the hour of the newest raw sample


_TICKS = """
    SELECT r.observed_at, r.gpu_id, r.gpu_state, r.gpu_util_pct, r.gpu_memory_used_mb,
           r.gpu_memory_total_mb, r.process_gpu_id, r.process_user, r.process_type,
           r.gpu_power_w, r.process_job_id
    FROM raw_observations(%(ws)s, %(host)s, %(lo)s, %(hi)s) r
    ORDER BY r.observed_at
"""


async def _bounds(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    host_id: int,
    from_: datetime,
    to: datetime,
    max_gap: timedelta,
) -> tuple[datetime, datetime]:
    """The replay range: the observation before `from` (within `max_gap`, the widest limit
    the workspace had), the first one after `to`."""
    cur = await conn.execute(
        """
        SELECT (SELECT max(observed_at)
                FROM raw_observations(%(ws)s, %(host)s, %(from)s - %(gap)s, %(from)s)
                WHERE observed_at < %(from)s),
               (SELECT min(observed_at)
                FROM raw_observations(%(ws)s, %(host)s, %(to)s, %(to)s + %(gap)s))
        """,
        {"ws": workspace_id, "host": host_id, "from": from_, "to": to, "gap": max_gap},
    )
    row = await cur.fetchone()
    assert row is not None  # a SELECT without FROM has one row
    before, after = row
    return before or from_, after or to


async def host_ticks(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    host_id: int,
    lo: datetime,
    hi: datetime,
) -> list[Tick]:
    """The host's observations in [lo, hi] as ticks, in time order (error heartbeats too)."""
    cur = await conn.execute(_TICKS, {"ws": workspace_id, "host": host_id, "lo": lo, "hi": hi})
    return [
        Tick(host_id, to_us(observed_at), gpu_ticks(*arrays))
        for observed_at, *arrays in await cur.fetchall()
    ]


def _keep_window(delta: RollupDelta, start_us: int, end_us: int) -> None:
    """Only the hours inside the window; those outside were replayed only to split intervals."""
    delta.gpu = {
        (host, gpu, hour): sums
        for (host, gpu, hour), sums in delta.gpu.items()
        if start_us <= hour < end_us
    }
    delta.user = {
        (host, gpu, user, hour): sums
        for (host, gpu, user, hour), sums in delta.user.items()
        if start_us <= hour < end_us
    }


async def rebuild(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, from_: datetime, to: datetime
) -> RebuildResult:
    """Replace the rollups of the UTC hours in [from_, to) with a replay of the raw samples.

    Runs in the caller's transaction. The workspace's host rows are locked first, in key
    order like the ingest path, so a concurrent ingest waits instead of interleaving.

    The GPU-hour rows come back with booked sums of 0: the booked hours of reservations
    are rebuilt by board.reservations.rebuild, which must follow in the same transaction
    (`gua-board rollups rebuild` does both, board/cli/rollups.py).
    """
    if from_.minute or from_.second or from_.microsecond or to.minute or to.second:
        raise ValueError("rebuild windows start and end on whole hours")
    hosts = await lock_hosts(conn, "h.id", "h.workspace_id = %s", [workspace_id])
    gaps = await load_schedule(conn, workspace_id)
    max_gap = timedelta(microseconds=gaps.widest_us)
    result = RebuildResult(hosts=len(hosts))
    window = {"ws": workspace_id, "from": from_, "to": to}
    # GPU hours first: their trigger zeroes the host hours, which then go too.
    for table in ("gpu_hour_rollups", "host_hour_rollups", "user_hour_rollups"):
        await conn.execute(
            f"DELETE FROM {table} WHERE workspace_id = %(ws)s "
            "AND hour_start >= %(from)s AND hour_start < %(to)s",
            window,
        )
    start_us, end_us = to_us(from_), to_us(to)
    for (host_id,) in hosts:
        lo, hi = await _bounds(conn, workspace_id, host_id, from_, to, max_gap)
        ticks = await host_ticks(conn, workspace_id, host_id, lo, hi)
        if not ticks:
            continue
        delta = RollupDelta()
        delta.credit_series(ticks, gaps)
        _keep_window(delta, start_us, end_us)
        await upsert_rollup_delta(conn, {host_id: workspace_id}, delta)
        result.observations += sum(1 for t in ticks if start_us <= t.observed_us < end_us)
        result.gpu_rows += len(delta.gpu)
        result.user_rows += len(delta.user)
    return result


async def rebuildable_from(
    conn: psycopg.AsyncConnection[Any], workspace_id: int
) -> datetime | None:
    """The first hour whose rollups the raw samples can still recompute (None: no raw)."""
    span = await span_of(conn, workspace_id)
    return span.oldest if span is not None else None


async def span_of(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> RawSpan | None:
    """What the workspace's raw samples can rebuild; None when it has none.

    Nothing before the oldest raw partition is left, and an interval opened by a
    dropped sample reaches at most the widest max gap into it: rollups of those hours
    can no longer be recomputed, so they are left alone. So are hours before any sample.
    """
    cur = await conn.execute(
        f"SELECT {WIDEST_SQL} FROM workspaces w WHERE w.id = %s", [workspace_id]
    )
    row = await cur.fetchone()
    if row is None:
        raise NotFound(f"no workspace {workspace_id}")
    max_gap = timedelta(seconds=int(row[0]))
    cur = await conn.execute(
        """
        SELECT least(min(earliest), min(latest)), greatest(max(earliest), max(latest))
        FROM (SELECT min(observed_at), max(observed_at) FROM host_observations
              WHERE workspace_id = %(ws)s
              UNION ALL
              SELECT min(first_at), max(last_at) FROM observation_hours
              WHERE workspace_id = %(ws)s) AS raw(earliest, latest)
        """,
        {"ws": workspace_id},
    )
    earliest, latest = (await cur.fetchone()) or (None, None)
    if earliest is None or latest is None:
        return None
    partitions = await existing_partitions(conn)
    first_day = min(partitions["host_observations"], default=earliest.date())
    kept_from = datetime(first_day.year, first_day.month, first_day.day, tzinfo=UTC)
    oldest = max(_floor_hour(earliest), _ceil_hour(kept_from + max_gap))
    return RawSpan(workspace_id, oldest, _floor_hour(latest))


def _floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _ceil_hour(moment: datetime) -> datetime:
    floor = _floor_hour(moment)
    return floor if floor == moment else floor + HOUR
