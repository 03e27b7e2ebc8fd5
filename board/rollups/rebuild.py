"""`gua-board rollups rebuild`: recompute hourly rollups from the raw samples.

The replay feeds each host's stored observations, in time order, through the same
RollupDelta crediting the ingest path uses, so a rebuilt hour equals the incremental
one. The boundary observations just outside the window (the one before `from` within
maxSampleGap, the first one at or after `to`) are read too, so intervals that cross a
boundary are split exactly as ingest split them; only hours inside the window are kept.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from board.db.urls import libpq_url, resolve_database_url
from board.errors import DomainError
from board.partitions.maintenance import existing_partitions
from board.reports.params import HOUR, parse_bound
from board.rollups.crediting import GpuTick, RollupDelta, Tick, compute_holders, to_us
from board.rollups.store import upsert_rollup_delta
from board.settings import Settings

_UTC_ZONE = zoneinfo.ZoneInfo("UTC")


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


_TICKS = """
    WITH holders AS (
        SELECT observed_at, gpu_id, array_agg(DISTINCT linux_user) AS users
        FROM process_samples
        WHERE workspace_id = %(ws)s AND host_id = %(host)s AND type = 'compute'
          AND observed_at >= %(lo)s AND observed_at <= %(hi)s
        GROUP BY observed_at, gpu_id
    )
    SELECT o.observed_at, g.gpu_id, g.state, g.util_pct, g.memory_used_mb, g.memory_total_mb,
           coalesce(p.users, '{}')
    FROM host_observations o
    LEFT JOIN gpu_samples g
           ON g.workspace_id = o.workspace_id AND g.host_id = o.host_id
          AND g.observed_at = o.observed_at
    LEFT JOIN holders p ON p.observed_at = g.observed_at AND p.gpu_id = g.gpu_id
    WHERE o.workspace_id = %(ws)s AND o.host_id = %(host)s
      AND o.observed_at >= %(lo)s AND o.observed_at <= %(hi)s
    ORDER BY o.observed_at, g.gpu_id
"""


async def _bounds(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    host_id: int,
    from_: datetime,
    to: datetime,
    max_gap: timedelta,
) -> tuple[datetime, datetime]:
    """The replay range: the observation before `from` (within max gap), the one after `to`."""
    cur = await conn.execute(
        """
        SELECT
            (SELECT max(observed_at) FROM host_observations
             WHERE workspace_id = %(ws)s AND host_id = %(host)s
               AND observed_at < %(from)s AND observed_at >= %(from)s - %(gap)s),
            (SELECT min(observed_at) FROM host_observations
             WHERE workspace_id = %(ws)s AND host_id = %(host)s
               AND observed_at >= %(to)s AND observed_at <= %(to)s + %(gap)s)
        """,
        {"ws": workspace_id, "host": host_id, "from": from_, "to": to, "gap": max_gap},
    )
    row = await cur.fetchone()
    assert row is not None
    return row[0] or from_, row[1] or to


async def _host_ticks(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    host_id: int,
    lo: datetime,
    hi: datetime,
) -> list[Tick]:
    """The host's observations in [lo, hi] as ticks, in time order (error heartbeats too)."""
    cur = await conn.execute(_TICKS, {"ws": workspace_id, "host": host_id, "lo": lo, "hi": hi})
    ticks: list[Tick] = []
    current: datetime | None = None
    gpus: list[GpuTick] = []
    for observed_at, gpu_id, state, util, used, total, users in await cur.fetchall():
        if observed_at != current:
            if current is not None:
                ticks.append(Tick(host_id, to_us(current), tuple(gpus)))
            current, gpus = observed_at, []
        if gpu_id is not None:
            holders = compute_holders((u, "compute") for u in users)
            gpus.append(GpuTick(gpu_id, state, util, used, total, holders))
    if current is not None:
        ticks.append(Tick(host_id, to_us(current), tuple(gpus)))
    return ticks


def _keep_window(delta: RollupDelta, start_us: int, end_us: int) -> None:
    delta.gpu = {k: v for k, v in delta.gpu.items() if start_us <= k[2] < end_us}
    delta.user = {k: v for k, v in delta.user.items() if start_us <= k[3] < end_us}


async def rebuild(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, from_: datetime, to: datetime
) -> RebuildResult:
    """Replace the rollups of the UTC hours in [from_, to) with a replay of the raw samples.

    Runs in the caller's transaction. The workspace's host rows are locked first, in key
    order like the ingest path, so a concurrent ingest waits instead of interleaving.
    """
    if from_.minute or from_.second or from_.microsecond or to.minute or to.second:
        raise ValueError("rebuild windows start and end on whole hours")
    cur = await conn.execute(
        """
        SELECT h.id, w.max_sample_gap_seconds
        FROM hosts h JOIN workspaces w ON w.id = h.workspace_id
        WHERE h.workspace_id = %s
        ORDER BY h.workspace_id, h.id
        FOR UPDATE OF h
        """,
        [workspace_id],
    )
    hosts = await cur.fetchall()
    result = RebuildResult(hosts=len(hosts))
    window = {"ws": workspace_id, "from": from_, "to": to}
    for table in ("gpu_hour_rollups", "user_hour_rollups"):
        await conn.execute(
            f"DELETE FROM {table} WHERE workspace_id = %(ws)s "
            "AND hour_start >= %(from)s AND hour_start < %(to)s",
            window,
        )
    start_us, end_us = to_us(from_), to_us(to)
    for host_id, gap_seconds in hosts:
        max_gap = timedelta(seconds=gap_seconds)
        lo, hi = await _bounds(conn, workspace_id, host_id, from_, to, max_gap)
        ticks = await _host_ticks(conn, workspace_id, host_id, lo, hi)
        if not ticks:
            continue
        delta = RollupDelta()
        delta.credit_series(ticks, gap_seconds * 1_000_000)
        _keep_window(delta, start_us, end_us)
        await upsert_rollup_delta(conn, {host_id: workspace_id}, delta)
        result.observations += sum(1 for t in ticks if start_us <= t.observed_us < end_us)
        result.gpu_rows += len(delta.gpu)
        result.user_rows += len(delta.user)
    return result


def _floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _ceil_hour(moment: datetime) -> datetime:
    floor = _floor_hour(moment)
    return floor if floor == moment else floor + HOUR


async def _run(args: argparse.Namespace, url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT id, max_sample_gap_seconds FROM workspaces WHERE slug = %s", [args.workspace]
        )
        row = await cur.fetchone()
        if row is None:
            sys.stderr.write(f"gua-board: no workspace {args.workspace!r}\n")
            return 2
        workspace_id, max_gap = int(row[0]), timedelta(seconds=int(row[1]))
        cur = await conn.execute(
            "SELECT min(observed_at), max(observed_at) FROM host_observations "
            "WHERE workspace_id = %s",
            [workspace_id],
        )
        earliest, latest = (await cur.fetchone()) or (None, None)
        partitions = await existing_partitions(conn)
        await conn.commit()
        if earliest is None or latest is None:
            sys.stdout.write(f"workspace {args.workspace} has no raw samples; nothing rebuilt\n")
            return 0
        # Nothing before the oldest raw partition is left, and an interval opened by a
        # dropped sample reaches at most max gap into it: rollups of those hours can no
        # longer be recomputed, so they are left alone. So are hours before any sample.
        first_day = min(partitions["host_observations"], default=earliest.date())
        kept_from = datetime(first_day.year, first_day.month, first_day.day, tzinfo=UTC)
        oldest = max(_floor_hour(earliest), _ceil_hour(kept_from + max_gap))
        try:
            start = parse_bound("--from", args.from_, "UTC", _UTC_ZONE) if args.from_ else oldest
            end = parse_bound("--to", args.to, "UTC", _UTC_ZONE) if args.to else _floor_hour(latest)
        except DomainError as exc:
            sys.stderr.write(f"gua-board: {exc.detail}\n")
            return 2
        if not args.to:
            end += HOUR
        if start < oldest:
            sys.stdout.write(
                f"raw samples are kept from {oldest.isoformat()}; rebuilding from there "
                "and keeping the older rollups\n"
            )
            start = oldest
        if end <= start:
            sys.stdout.write("nothing to rebuild in that window\n")
            return 0
        total = RebuildResult()
        day = start
        # One transaction per day: host locks are held for seconds, not the whole replay.
        while day < end:
            stop = min(day.replace(hour=0) + timedelta(days=1), end)
            async with conn.transaction():
                total.add(await rebuild(conn, workspace_id, day, stop))
            day = stop
        sys.stdout.write(
            f"rebuilt {args.workspace} from {start.isoformat()} to {end.isoformat()}: "
            f"{total.observations} observations on {total.hosts} hosts, "
            f"{total.gpu_rows} GPU-hour and {total.user_rows} user-hour rows\n"
        )
        return 0


def rebuild_command(args: argparse.Namespace, settings: Settings) -> int:
    """Entry point of `gua-board rollups rebuild --workspace SLUG [--from --to]`."""
    url = libpq_url(resolve_database_url(settings))
    return asyncio.run(_run(args, url))
