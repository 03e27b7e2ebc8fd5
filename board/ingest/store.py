"""The write path: many observations, one transaction, two round trips.

Per batch: lock the hosts (in key order, so batches never deadlock), resolve GPU ids,
look up neighbours only for out-of-order points, then insert the raw rows, upsert the
rollup deltas with one statement per table, move the hosts' newest state forward and
commit. psycopg's pipeline mode sends BEGIN with the lock and everything after it in
one go: on a small machine each round trip also waits for the event loop (busy parsing
other requests) and for the backend to be scheduled, and that latency, not CPU, was
what limited a writer (docs/benchmarks.md).
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from board.db.pgtext import int_array, text_array
from board.errors import Unprocessable
from board.ingest.normalize import Observation, decode_tick, encode_tick, tick_of
from board.ingest.rawrows import GpuInfo, GpuKey, insert_raw
from board.rollups.crediting import GpuTick, RollupDelta, Tick, compute_holders, to_us
from board.rollups.store import upsert_rollup_delta

__all__ = ["GpuInfo", "GpuKey", "Outcome", "TooManyGpus", "load_ticks", "store_batch"]


class Outcome(enum.Enum):
    STORED = "stored"
    DUPLICATE = "duplicate"
    REVOKED = "revoked"


class TooManyGpus(Unprocessable):
    """A push would give its host more distinct GPUs than the workspace allows."""

    def __init__(self, limit: int, known: int, new: int) -> None:
        super().__init__(
            f"This push would add {new} new GPU(s) to the {known} this host already has, "
            f"above the workspace's limit of {limit} GPUs per host (setting maxGpusPerHost); "
            "nothing was stored.",
            reason="too_many_gpus",
        )
        self.limit = limit


@dataclass
class _HostRow:
    workspace_id: int
    host_id: int
    revoked: bool
    latest_observed_at: datetime | None
    # The newest observation's tick (normalize.encode_tick), so the in-order case needs
    # no read of raw samples to credit the interval it closes.
    latest_tick: str | None
    max_gap_us: int
    max_gpus: int  # the workspace's maxGpusPerHost


async def _lock_hosts(
    conn: psycopg.AsyncConnection[Any], keys: list[tuple[int, int]]
) -> dict[int, _HostRow]:
    cur = await conn.execute(
        """
        SELECT h.workspace_id, h.id, h.revoked_at IS NOT NULL, h.latest_observed_at,
               h.latest_tick, w.max_sample_gap_seconds, w.max_gpus_per_host
        FROM hosts h
        JOIN workspaces w ON w.id = h.workspace_id
        WHERE (h.workspace_id, h.id) IN (SELECT * FROM unnest(%s::bigint[], %s::bigint[]))
        ORDER BY h.workspace_id, h.id
        FOR UPDATE OF h
        """,
        [int_array(k[0] for k in keys), int_array(k[1] for k in keys)],
    )
    return {
        row[1]: _HostRow(
            row[0], row[1], row[2], row[3], row[4], int(row[5]) * 1_000_000, int(row[6])
        )
        for row in await cur.fetchall()
    }


async def _resolve_gpu_ids(
    conn: psycopg.AsyncConnection[Any],
    candidates: Sequence[tuple[int, Observation]],
    hosts: dict[int, _HostRow],
    cache: dict[GpuKey, GpuInfo],
    touched: list[GpuKey],
) -> dict[int, TooManyGpus]:
    """Make sure every (host, uuid) has a GPU row; the cache spares the round trips.

    `candidates` are (index, observation), each host's in time order. A GPU the cache
    does not know may be new, and a host may have at most its workspace's
    maxGpusPerHost distinct GPUs: the host's GPUs are read (its row is locked, so no
    other push of it can add one meanwhile) and an observation that would pass the
    limit is refused whole. Returns the refused ones by index. The keys cached here
    are listed in `touched`: if the transaction fails they must be forgotten, since
    the rows they point to were rolled back.
    """
    unknown = {
        (obs.host_id, g.uuid)
        for _, obs in candidates
        for g in obs.snapshot.gpus
        if (obs.host_id, g.uuid) not in cache
    }
    refused: dict[int, TooManyGpus] = {}
    if unknown:
        have = await _host_gpus(conn, hosts, {host_id for host_id, _ in unknown})
        for i, obs in candidates:
            known = have[obs.host_id]
            new = {g.uuid for g in obs.snapshot.gpus} - known
            if new and len(known) + len(new) > hosts[obs.host_id].max_gpus:
                refused[i] = TooManyGpus(hosts[obs.host_id].max_gpus, len(known), len(new))
            else:
                known |= new
    wanted: dict[GpuKey, tuple[int, int, str, int]] = {}
    for i, obs in candidates:
        if i in refused:
            continue
        for g in obs.snapshot.gpus:
            key = (obs.host_id, g.uuid)
            known_info = cache.get(key)
            if known_info is None or known_info[1:] != (g.index, g.name, g.memoryTotalMb):
                wanted[key] = (obs.workspace_id, g.index, g.name, g.memoryTotalMb)
    if not wanted:
        return refused
    items = sorted(wanted.items())
    cur = await conn.execute(
        """
        INSERT INTO gpus (workspace_id, host_id, uuid, gpu_index, name, memory_total_mb)
        SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::int[], %s::text[],
                             %s::int[])
        ON CONFLICT (workspace_id, host_id, uuid) DO UPDATE
            SET gpu_index = EXCLUDED.gpu_index, name = EXCLUDED.name,
                memory_total_mb = EXCLUDED.memory_total_mb
        RETURNING host_id, uuid, id, gpu_index, name, memory_total_mb
        """,
        [
            [v[0] for _, v in items],
            [k[0] for k, _ in items],
            [k[1] for k, _ in items],
            [v[1] for _, v in items],
            [v[2] for _, v in items],
            [v[3] for _, v in items],
        ],
    )
    for host_id, uuid, gpu_id, index, name, total in await cur.fetchall():
        touched.append((host_id, uuid))
        cache[(host_id, uuid)] = (gpu_id, index, name, total)
    return refused


async def _host_gpus(
    conn: psycopg.AsyncConnection[Any], hosts: dict[int, _HostRow], host_ids: set[int]
) -> dict[int, set[str]]:
    """The uuids of the GPUs these hosts have now."""
    keys = sorted((hosts[h].workspace_id, h) for h in host_ids)
    cur = await conn.execute(
        """
        SELECT g.host_id, g.uuid FROM gpus g
        JOIN unnest(%s::bigint[], %s::bigint[]) AS k(ws, host_id)
          ON g.workspace_id = k.ws AND g.host_id = k.host_id
        """,
        [int_array(k[0] for k in keys), int_array(k[1] for k in keys)],
    )
    found: dict[int, set[str]] = defaultdict(set)
    for host_id, uuid in await cur.fetchall():
        found[host_id].add(uuid)
    return found


async def _neighbours(
    conn: psycopg.AsyncConnection[Any], points: list[tuple[int, int, datetime]]
) -> dict[tuple[int, datetime], tuple[bool, datetime | None, datetime | None]]:
    """For out-of-order points: already stored?, the stored predecessor and successor."""
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
        [[p[0] for p in points], [p[1] for p in points], [p[2] for p in points]],
    )
    return {(r[0], r[1]): (r[2], r[3], r[4]) for r in await cur.fetchall()}


async def load_ticks(
    conn: psycopg.AsyncConnection[Any], keys: list[tuple[int, int, datetime]]
) -> dict[tuple[int, datetime], Tick]:
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
        [[k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]],
    )
    gpus: dict[tuple[int, datetime], list[GpuTick]] = defaultdict(list)
    for host_id, t, gpu_id, state, util, mem, total, users in await cur.fetchall():
        bucket = gpus[(host_id, t)]
        if gpu_id is not None:
            holders = compute_holders((u, "compute") for u in users)
            bucket.append(GpuTick(gpu_id, state, util, mem, total, holders))
    return {
        key: Tick(host_id=key[0], observed_us=to_us(key[1]), gpus=tuple(v))
        for key, v in gpus.items()
    }


async def _advance_latest(
    conn: psycopg.AsyncConnection[Any], newest: list[tuple[Observation, Tick]]
) -> None:
    if not newest:
        return
    await conn.execute(
        """
        UPDATE hosts h SET
            latest_observed_at = u.observed_at,
            latest_received_at = u.received_at,
            latest_collection_status = u.status,
            latest_errors = string_to_array(u.errors, chr(31)),
            latest_tick = u.tick,
            hostname = u.hostname,
            agent_version = u.agent_version,
            driver_version = u.driver_version
        FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[], %s::timestamptz[],
                    %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[])
             AS u(ws, host_id, observed_at, received_at, status, errors, tick, hostname,
                  agent_version, driver_version)
        WHERE h.workspace_id = u.ws AND h.id = u.host_id
        """,
        [
            int_array(o.workspace_id for o, _ in newest),
            int_array(o.host_id for o, _ in newest),
            text_array(o.observed_at.isoformat() for o, _ in newest),
            text_array(o.received_at.isoformat() for o, _ in newest),
            text_array(o.snapshot.collectionStatus for o, _ in newest),
            # Arrays of arrays must be rectangular; join each host's codes instead.
            text_array(chr(31).join(o.snapshot.errors) for o, _ in newest),
            text_array(encode_tick(t) for _, t in newest),
            text_array(o.snapshot.host.hostname for o, _ in newest),
            text_array(o.snapshot.host.agentVersion for o, _ in newest),
            text_array(o.snapshot.host.driverVersion for o, _ in newest),
        ],
    )


async def store_batch(
    conn: psycopg.AsyncConnection[Any],
    observations: Sequence[Observation],
    gpu_cache: dict[GpuKey, GpuInfo],
    prepared: Callable[[], None] | None = None,
) -> list[Outcome | TooManyGpus]:
    """Store a batch in one transaction and commit it; one outcome per observation.

    `conn` must not be in autocommit mode or in a transaction; on any error the
    transaction is rolled back and the error raised. `prepared` is called once the
    batch's writes are computed, just before they are sent with the COMMIT.
    """
    keys = sorted({(o.workspace_id, o.host_id) for o in observations})
    touched: list[GpuKey] = []
    try:
        async with conn.pipeline():  # BEGIN travels with the lock
            hosts = await _lock_hosts(conn, keys)
        return await _write_locked(conn, observations, hosts, gpu_cache, touched, prepared)
    except BaseException:
        for key in touched:  # their rows were rolled back (or may have been)
            gpu_cache.pop(key, None)
        await conn.rollback()
        raise


async def _write_locked(
    conn: psycopg.AsyncConnection[Any],
    observations: Sequence[Observation],
    hosts: dict[int, _HostRow],
    gpu_cache: dict[GpuKey, GpuInfo],
    touched: list[GpuKey],
    prepared: Callable[[], None] | None,
) -> list[Outcome | TooManyGpus]:
    outcomes: list[Outcome | TooManyGpus | None] = [None] * len(observations)

    per_host: dict[int, list[int]] = defaultdict(list)
    for i, o in enumerate(observations):
        host = hosts.get(o.host_id)
        if host is None or host.revoked:
            outcomes[i] = Outcome.REVOKED
        else:
            per_host[o.host_id].append(i)

    # Duplicates inside the batch: the first copy wins.
    seen: set[tuple[int, datetime]] = set()
    for idxs in per_host.values():
        for i in list(idxs):
            key = (observations[i].host_id, observations[i].observed_at)
            if key in seen:
                outcomes[i] = Outcome.DUPLICATE
                idxs.remove(i)
            seen.add(key)

    # Points not newer than the host's newest need the stored neighbourhood.
    slow: list[tuple[int, int, datetime]] = []
    for host_id, idxs in per_host.items():
        latest = hosts[host_id].latest_observed_at
        for i in idxs:
            if latest is not None and observations[i].observed_at <= latest:
                slow.append((hosts[host_id].workspace_id, host_id, observations[i].observed_at))
    neighbours = await _neighbours(conn, slow) if slow else {}
    for host_id, idxs in per_host.items():
        for i in list(idxs):
            n = neighbours.get((host_id, observations[i].observed_at))
            if n is not None and n[0]:
                outcomes[i] = Outcome.DUPLICATE
                idxs.remove(i)

    candidates = [
        (i, observations[i])
        for idxs in per_host.values()
        for i in sorted(idxs, key=lambda i: observations[i].observed_at)
    ]
    refused = await _resolve_gpu_ids(conn, candidates, hosts, gpu_cache, touched)
    for i, too_many in refused.items():
        outcomes[i] = too_many
        per_host[observations[i].host_id].remove(i)
    fresh = [observations[i] for idxs in per_host.values() for i in idxs]

    # Group each host's new points by the stored interval they fall into.
    delta = RollupDelta()
    before_keys: list[tuple[int, int, datetime]] = []
    groups: list[tuple[_HostRow, datetime | None, datetime | None, list[Tick]]] = []
    newest: list[tuple[Observation, Tick]] = []
    for host_id, idxs in per_host.items():
        if not idxs:
            continue
        host = hosts[host_id]
        ordered = sorted((observations[i] for i in idxs), key=lambda o: o.observed_at)
        ids = {g.uuid: gpu_cache[(host_id, g.uuid)][0] for o in ordered for g in o.snapshot.gpus}
        current: tuple[datetime | None, datetime | None] | None = None
        tick = None
        for o in ordered:
            n = neighbours.get((host_id, o.observed_at))
            span = (n[1], n[2]) if n is not None else (host.latest_observed_at, None)
            if span != current:
                groups.append((host, span[0], span[1], []))
                current = span
                before = span[0]
                if before is not None and (
                    before != host.latest_observed_at or not host.latest_tick
                ):
                    before_keys.append((host.workspace_id, host_id, before))
            tick = tick_of(o, ids)
            groups[-1][3].append(tick)
        if host.latest_observed_at is None or ordered[-1].observed_at > host.latest_observed_at:
            assert tick is not None
            newest.append((ordered[-1], tick))

    stored_ticks = await load_ticks(conn, sorted(set(before_keys)))
    for host, before, after, ticks in groups:
        opener: Tick | None = None
        if before is not None:
            if before == host.latest_observed_at and host.latest_tick is not None:
                opener = decode_tick(host.host_id, to_us(before), host.latest_tick)
            else:
                opener = stored_ticks.get((host.host_id, before))
        delta.credit_insertion(
            opener, ticks, to_us(after) if after is not None else None, host.max_gap_us
        )

    if prepared is not None:
        prepared()
    async with conn.pipeline():  # one round trip: all the writes and COMMIT
        if fresh:
            await insert_raw(conn, fresh, gpu_cache)
            await upsert_rollup_delta(conn, hosts_workspace(hosts), delta)
            await _advance_latest(conn, newest)
        await conn.commit()
    for idxs in per_host.values():
        for i in idxs:
            outcomes[i] = Outcome.STORED
    return [o if o is not None else Outcome.REVOKED for o in outcomes]


def hosts_workspace(hosts: dict[int, _HostRow]) -> dict[int, int]:
    return {h.host_id: h.workspace_id for h in hosts.values()}
