"""Concurrent ingest batches over the same hosts never deadlock, and count every interval once.

Each batch locks its hosts FOR UPDATE in key order and keeps those locks until its
COMMIT, so two batches of one host never interleave. That holds only if the batch runs
in a transaction of its own: a pooled connection left in autocommit mode by another
pool user (the notices worker did that) ran the lock and the writes as separate
implicit transactions, the lock was gone before the writes, and two batches of a host
deadlocked (the hosts UPDATE against the rollup upsert) or both credited the same
interval.

The hosts here all report the same GPU uuids (as fake agents and tests do), take late
and repeated points in concurrent groups, and one of them has a booking in force.
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from board.db.urls import libpq_url
from board.ingest.normalize import Observation
from board.ingest.schemas import SnapshotIn
from board.ingest.store import GpuInfo, GpuKey, Outcome, store_batch
from board.rollups.rebuild import rebuild
from tests.board.builders import enroll, push
from tests.board.reservation_builders import MINUTE, book_at
from tests.board.test_reports_builders import (
    day_rollups_mismatch,
    days_ago_midnight,
    gpu,
    observation,
    proc,
    quick_tenant,
    rollup_rows,
    workspace_id,
)

CONCURRENT_HOSTS = ("a", "b", "c")


def _series(start: datetime) -> list[dict[str, Any]]:
    """About a minute apart across midnight, GPU-0 changing hands, GPU-1 on and off."""
    kinds = ["alice", "alice", "idle", "bob", "held", "held", "alice", "error", "partial"]
    bodies = []
    for i in range(40):
        at = start + i * MINUTE + timedelta(seconds=(i * 7) % 20)
        kind = kinds[i % len(kinds)]
        if kind == "error":
            bodies.append(observation(at, [], status="error"))
            continue
        if kind == "idle":
            g0 = gpu(0, state="idle")
        elif kind == "held":
            g0 = gpu(0, state="idle_held", procs=[proc("carol")])
        else:
            user = "bob" if kind == "bob" else "alice"
            g0 = gpu(0, util=40 + i, state="active", procs=[proc(user)])
        gpus = [g0] if i % 5 == 3 else [g0, gpu(1, util=i, state="active", procs=[proc("dan")])]
        body = observation(at, gpus, status="partial" if kind == "partial" else "ok")
        if kind == "partial":
            body["errors"] = ["process_list_unavailable"]
        bodies.append(body)
    return bodies


async def _by_host_name(conn: psycopg.AsyncConnection[Any], ws: int) -> dict[str, Any]:
    """Every host's rollups and booking figures, keyed by host name and GPU uuid, not ids."""
    queries = {
        "gpu_hours": """
            SELECT h.display_name, g.uuid, r.hour_start, r.covered_us, r.active_us,
                   r.idle_held_us, r.idle_us, r.util_pct_us, r.memory_used_mb_us,
                   r.memory_total_mb_us, r.sample_count
            FROM gpu_hour_rollups r
            JOIN gpus g ON g.workspace_id = r.workspace_id AND g.id = r.gpu_id
            JOIN hosts h ON h.workspace_id = r.workspace_id AND h.id = r.host_id
            WHERE r.workspace_id = %s AND r.covered_us + r.sample_count <> 0
        """,
        "user_hours": """
            SELECT h.display_name, g.uuid, r.linux_user, r.hour_start, r.held_us,
                   r.active_us, r.idle_held_us
            FROM user_hour_rollups r
            JOIN gpus g ON g.workspace_id = r.workspace_id AND g.id = r.gpu_id
            JOIN hosts h ON h.workspace_id = r.workspace_id AND h.id = r.host_id
            WHERE r.workspace_id = %s AND (r.held_us, r.active_us, r.idle_held_us) <> (0, 0, 0)
        """,
        "host_hours": """
            SELECT h.display_name, r.hour_start, r.covered_us, r.active_us, r.idle_held_us,
                   r.idle_us, r.util_pct_us, r.memory_used_mb_us, r.memory_total_mb_us,
                   r.sample_count
            FROM host_hour_rollups r
            JOIN hosts h ON h.workspace_id = r.workspace_id AND h.id = r.host_id
            WHERE r.workspace_id = %s AND r.covered_us + r.sample_count <> 0
        """,
        "figures": """
            SELECT h.display_name, g.uuid, f.hour_start, f.covered_us, f.used_us,
                   f.idle_held_us, f.conflict_us, f.unused_us
            FROM reservation_hour_figures f
            JOIN gpus g ON g.workspace_id = f.workspace_id AND g.id = f.gpu_id
            JOIN hosts h ON h.workspace_id = g.workspace_id AND h.id = g.host_id
            WHERE f.workspace_id = %s AND f.covered_us <> 0
        """,
        "newest": """
            SELECT h.display_name, h.latest_observed_at, h.latest_collection_status,
                   array_to_string(h.latest_errors, ',')
            FROM hosts h WHERE h.workspace_id = %s
        """,
    }
    found: dict[str, Any] = {}
    for table, sql in queries.items():
        cur = await conn.execute(sql, [ws])
        per_host: dict[str, set[tuple[Any, ...]]] = {}
        for name, *rest in await cur.fetchall():
            per_host.setdefault(name, set()).add(tuple(rest))
        found[table] = per_host
    return found


def _observation(ws: int, host_id: int, body: dict[str, Any]) -> Observation:
    snapshot = SnapshotIn.model_validate(body)
    return Observation(ws, host_id, snapshot.observed_at(), datetime.now(UTC), snapshot)


async def _host_ids(conn: psycopg.AsyncConnection[Any], ws: int) -> dict[str, int]:
    cur = await conn.execute("SELECT display_name, id FROM hosts WHERE workspace_id = %s", [ws])
    return {name: int(host_id) for name, host_id in await cur.fetchall()}


async def _writer(
    url: str,
    autocommit: bool,
    batches: asyncio.Queue[list[Observation]],
    cache: dict[GpuKey, GpuInfo],
    failures: list[BaseException],
) -> None:
    """Store batches from the queue on a connection of its own, in the mode it was left in."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=autocommit) as conn:
        while not batches.empty():
            batch = batches.get_nowait()
            try:
                await store_batch(conn, batch, cache)
            except psycopg.errors.DeadlockDetected as exc:
                failures.append(exc)
                await batches.put(batch)  # as the writer does: try it again
            await asyncio.sleep(0)


async def test_concurrent_batches_never_deadlock_and_equal_in_order(app: Any, client: Any) -> None:
    tenant = await quick_tenant(app, "conc")
    hosts = {name: await enroll(client, tenant, name) for name in ("in-order", *CONCURRENT_HOSTS)}
    start = days_ago_midnight(1) - timedelta(minutes=20)
    first = observation(start - 2 * MINUTE, [gpu(0), gpu(1)])
    for host in hosts.values():  # their GPUs exist before the bookings name them
        assert (await push(client, host["agentToken"], first)).status_code == 202
    for name in ("in-order", "a"):
        await book_at(
            app,
            tenant,
            start - MINUTE,
            hostId=hosts[name]["hostId"],
            start=(start + 5 * MINUTE).isoformat(),
            end=(start + 30 * MINUTE).isoformat(),
            linuxUsers=["alice"],
        )
    bodies = _series(start)
    for body in bodies:
        assert (await push(client, hosts["in-order"]["agentToken"], body)).status_code == 202

    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url) as conn:
        ws = await workspace_id(conn, tenant.slug)
        ids = await _host_ids(conn, ws)
    # Each concurrent host gets the series shuffled, with repeats, cut into small batches
    # that mix the hosts; six writers store them at once, half of them on connections
    # left in autocommit mode.
    rng = random.Random(20261203)
    points = [
        _observation(ws, ids[name], body)
        for name in CONCURRENT_HOSTS
        for body in bodies + rng.sample(bodies, 4)
    ]
    rng.shuffle(points)
    batches: asyncio.Queue[list[Observation]] = asyncio.Queue()
    while points:
        size = rng.randint(1, 4)
        batches.put_nowait(points[:size])
        points = points[size:]
    failures: list[BaseException] = []
    cache: dict[GpuKey, GpuInfo] = {}
    await asyncio.gather(*(_writer(url, i % 2 == 1, batches, cache, failures) for i in range(6)))
    assert failures == []

    async with await psycopg.AsyncConnection.connect(url) as conn:
        found = await _by_host_name(conn, ws)
        for table in ("gpu_hours", "user_hours", "host_hours", "newest"):
            for name in CONCURRENT_HOSTS:
                assert found[table][name] == found[table]["in-order"], (table, name)
        assert found["figures"]["a"] == found["figures"]["in-order"]
        assert found["figures"]["in-order"]  # the booking was credited at all

        incremental = await rollup_rows(conn, ws)
        assert await day_rollups_mismatch(conn, ws) == []
        hour = start.replace(minute=0, second=0, microsecond=0)
        async with conn.transaction():
            await rebuild(conn, ws, hour - timedelta(hours=1), hour + timedelta(hours=2))
        assert await rollup_rows(conn, ws) == incremental


async def test_a_batch_on_an_autocommit_connection_holds_its_host_lock_until_commit(
    app: Any, client: Any
) -> None:
    tenant = await quick_tenant(app, "lock")
    host = await enroll(client, tenant, "locked")
    start = days_ago_midnight(1)
    first = observation(start, [gpu(0)])
    assert (await push(client, host["agentToken"], first)).status_code == 202
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url) as conn:
        ws = await workspace_id(conn, tenant.slug)
        host_id = (await _host_ids(conn, ws))["locked"]
    seen: list[str] = []

    def writes_about_to_go() -> None:
        # Another session, at the moment the batch's writes are computed, must find the
        # host row still locked by the batch (blocking for a moment is fine in a test).
        with psycopg.connect(url) as other:
            try:
                other.execute("SELECT 1 FROM hosts WHERE id = %s FOR UPDATE NOWAIT", [host_id])
                seen.append("free")
            except psycopg.errors.LockNotAvailable:
                seen.append("locked")

    later = _observation(ws, host_id, observation(start + MINUTE, [gpu(0, state="idle")]))
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        outcomes = await store_batch(conn, [later], {}, writes_about_to_go)
        assert conn.autocommit  # handed back in the mode it came in
        cur = await conn.execute("SELECT latest_observed_at FROM hosts WHERE id = %s", [host_id])
        assert await cur.fetchone() == (later.observed_at,)
    assert outcomes == [Outcome.STORED]
    assert seen == ["locked"]
