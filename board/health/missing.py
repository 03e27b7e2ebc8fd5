"""Missing GPUs: a GPU its host reported before, absent from the host's newest observation
while the host is otherwise fine (fresh: `ok` or `partial`).

Since when: the first observation without it, after the last one that listed it. That is
read from the raw history only for the GPUs absent now (rare), in a range the GPU's
newest rollup hour narrows (a GPU's last listed interval is credited to that hour or the
one before), at most LOOKBACK back: a GPU absent for longer is "missing since at least"
the first observation of that range. Nothing is written and the ingest path is not
touched: a missing GPU is simply not observed, so it is never billed (accounting.md).

A GPU an admin retired (board.health.retire) is not missing while it stays away; seen in
an observation after its retirement, it counts as any other GPU again.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

# Absent this long (the host fresh all along) before a GPU is missing.
MISSING_AFTER = timedelta(minutes=2)
# How far back the raw history is read for when a GPU was last listed.
LOOKBACK = timedelta(days=1)
HOUR = timedelta(hours=1)
FRESH = ("ok", "partial")


@dataclass(frozen=True)
class HostState:
    """What a host's row says now: its newest observation, and whether it is fresh."""

    host_id: int
    latest_observed_at: datetime | None
    fresh: bool


@dataclass(frozen=True)
class MissingGpu:
    host_id: int
    gpu_id: int
    uuid: str
    index: int
    name: str
    # The first observation without it (at least this early: see the module's words).
    since: datetime
    # The last observation that listed it, when within the range read.
    last_seen_at: datetime | None

    def missing(self, now: datetime) -> bool:
        """Absent for at least MISSING_AFTER."""
        return now - self.since >= MISSING_AFTER


def listed_gpus(tick: str | None) -> frozenset[int]:
    """The GPU ids of a host's newest tick (board.ingest.normalize.encode_tick's JSON)."""
    return frozenset(int(g[0]) for g in json.loads(tick)) if tick else frozenset()


@dataclass(frozen=True)
class _Device:
    gpu_id: int
    host_id: int
    uuid: str
    index: int
    name: str


# The hosts' GPUs their newest tick does not list (the tick's JSON read by PostgreSQL:
# a fleet page reads 300 hosts, and parsing their ticks in Python was most of this).
_ABSENT = """
    SELECT g.id, g.host_id, g.uuid, g.gpu_index, g.name
    FROM hosts h
    CROSS JOIN LATERAL (
        SELECT coalesce(array_agg((e ->> 0)::bigint), '{}') AS listed
        FROM json_array_elements(coalesce(h.latest_tick, '[]')::json) e
    ) t
    JOIN gpus g ON g.workspace_id = h.workspace_id AND g.host_id = h.id
    WHERE h.workspace_id = %s AND h.id = ANY(%s) AND g.id <> ALL(t.listed)
"""
_RETIRED = """
    SELECT gpu_id, retired_at FROM gpu_retirements WHERE workspace_id = %s AND gpu_id = ANY(%s)
"""
# Each GPU's newest rollup hour: one backward index step on the rollups' primary key.
_NEWEST_HOUR = """
    SELECT g.id, (SELECT r.hour_start FROM gpu_hour_rollups r
                  WHERE r.workspace_id = %s AND r.gpu_id = g.id
                  ORDER BY r.hour_start DESC LIMIT 1)
    FROM unnest(%s::bigint[]) AS g(id)
"""
# For each GPU: the last observation in [lo, hi] listing it, and the first one after that
# (the first of the range when none listed it).
_PRESENCE = """
    WITH obs AS MATERIALIZED (
        SELECT o.observed_at, o.gpu_id FROM raw_observations(%(ws)s, %(host)s, %(lo)s, %(hi)s) o
    )
    SELECT g.id, s.seen,
           (SELECT min(o.observed_at) FROM obs o
            WHERE s.seen IS NULL OR o.observed_at > s.seen)
    FROM unnest(%(gpus)s::bigint[]) AS g(id)
    CROSS JOIN LATERAL (
        SELECT max(o.observed_at) AS seen FROM obs o WHERE g.id = ANY(o.gpu_id)
    ) s
"""


async def absent_gpus(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, hosts: Iterable[HostState]
) -> list[MissingGpu]:
    """Every GPU absent from its fresh host's newest observation, not retired, with since
    when (filter with MissingGpu.missing for those absent long enough), by host and index."""
    fresh = {h.host_id: h for h in hosts if h.fresh and h.latest_observed_at is not None}
    if not fresh:
        return []
    cur = await conn.execute(_ABSENT, [workspace_id, list(fresh)])
    absent = [_Device(*row) for row in await cur.fetchall()]
    if not absent:
        return []
    ids = [d.gpu_id for d in absent]
    retired = dict(await (await conn.execute(_RETIRED, [workspace_id, ids])).fetchall())
    hours = dict(await (await conn.execute(_NEWEST_HOUR, [workspace_id, ids])).fetchall())
    by_host: dict[int, list[_Device]] = defaultdict(list)
    for device in absent:
        hour = hours.get(device.gpu_id)
        retired_at = retired.get(device.gpu_id)
        # Retired, and certainly not listed since (its newest hour ended before): skip
        # the raw read.
        if retired_at is not None and (hour is None or hour + HOUR <= retired_at):
            continue
        by_host[device.host_id].append(device)
    found: list[MissingGpu] = []
    for host_id, devices in by_host.items():
        latest = fresh[host_id].latest_observed_at
        assert latest is not None
        # A GPU never credited (listed in one observation only) is looked for all the way.
        starts = [hours.get(d.gpu_id) or latest - LOOKBACK for d in devices]
        lo = max(min(starts) - HOUR, latest - LOOKBACK)
        wanted = [d.gpu_id for d in devices]
        cur = await conn.execute(
            _PRESENCE, {"ws": workspace_id, "host": host_id, "lo": lo, "hi": latest, "gpus": wanted}
        )
        presence = {gpu_id: (seen, since) for gpu_id, seen, since in await cur.fetchall()}
        for device in devices:
            seen, since = presence.get(device.gpu_id, (None, None))
            retired_at = retired.get(device.gpu_id)
            if retired_at is not None and (seen is None or seen <= retired_at):
                continue
            found.append(
                MissingGpu(
                    host_id=host_id,
                    gpu_id=device.gpu_id,
                    uuid=device.uuid,
                    index=device.index,
                    name=device.name,
                    since=since or lo,
                    last_seen_at=seen,
                )
            )
    return sorted(found, key=lambda m: (m.host_id, m.index, m.uuid))
