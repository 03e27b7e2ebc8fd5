"""Host-hour rollups always equal their GPUs' hour rows summed: after ingest (pushes in
any order, late ones re-splitting stored intervals), after a rebuild from raw samples,
after retention and after a direct write; and the day rollups still agree."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from board.db.urls import libpq_url
from board.rollups.crediting import GPU_COLUMNS
from board.rollups.daily import refresh_day_rollups
from board.rollups.rebuild import rebuild
from board.rollups.retention import drop_expired_rollups
from tests.board.builders import enroll, push
from tests.board.test_reports_builders import (
    day_rollups_mismatch,
    days_ago_midnight,
    gpu,
    observation,
    proc,
    quick_tenant,
    set_max_gap,
    workspace_id,
)

# Every sum a GPU hour keeps, energy included: the trigger must carry each one.
SUMS = ", ".join(GPU_COLUMNS)


async def host_hours(conn: psycopg.AsyncConnection[Any], ws: int) -> list[tuple[Any, ...]]:
    cur = await conn.execute(
        f"SELECT host_id, hour_start, {SUMS} FROM host_hour_rollups "
        "WHERE workspace_id = %s AND covered_us <> 0 ORDER BY 1, 2",
        [ws],
    )
    return await cur.fetchall()


async def recomputed(conn: psycopg.AsyncConnection[Any], ws: int) -> list[tuple[Any, ...]]:
    summed = ", ".join(f"sum({c})::bigint" for c in SUMS.split(", "))
    cur = await conn.execute(
        f"SELECT host_id, hour_start, {summed} FROM gpu_hour_rollups WHERE workspace_id = %s "
        "GROUP BY 1, 2 HAVING sum(covered_us) <> 0 ORDER BY 1, 2",
        [ws],
    )
    return await cur.fetchall()


async def _assert_equal(conn: psycopg.AsyncConnection[Any], ws: int) -> None:
    found = await host_hours(conn, ws)
    assert found == await recomputed(conn, ws)
    # No host hour is left with time while its GPUs have none (or negative figures).
    cur = await conn.execute(
        "SELECT count(*) FROM host_hour_rollups WHERE workspace_id = %s AND "
        "(covered_us < 0 OR active_us < 0 OR idle_us < 0 OR idle_held_us < 0)",
        [ws],
    )
    assert (await cur.fetchone()) == (0,)


async def test_host_hours_follow_ingest_rebuild_and_retention(app, client) -> None:
    tenant = await quick_tenant(app)
    await set_max_gap(client, tenant, 900)
    hosts = [await enroll(client, tenant, f"node-{i}") for i in range(2)]
    base = days_ago_midnight(3)
    rng = random.Random(20)
    pushes = []
    for host in hosts:
        for minute in range(-50, 200, 7):
            gpus = [
                gpu(i, util=rng.randrange(0, 100), procs=[proc(rng.choice(["ann", "bo"]))])
                for i in range(rng.choice([1, 2, 3]))
            ]
            pushes.append((host, observation(base + timedelta(minutes=minute), gpus)))
    rng.shuffle(pushes)  # late observations re-split the intervals they land in
    for host, body in pushes:
        assert (await push(client, host["agentToken"], body)).status_code == 202

    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        first = await host_hours(conn, ws)
        assert len({row[0] for row in first}) == 2
        await _assert_equal(conn, ws)

        # Damaged host hours are rebuilt with their GPU hours from the raw samples.
        await conn.execute(
            "UPDATE host_hour_rollups SET covered_us = 1 WHERE workspace_id = %s", [ws]
        )
        async with conn.transaction():
            await rebuild(conn, ws, base - timedelta(hours=1), base + timedelta(hours=5))
        assert await host_hours(conn, ws) == first
        # A window cut mid-series too.
        async with conn.transaction():
            await rebuild(conn, ws, base + timedelta(hours=1), base + timedelta(hours=2))
        assert await host_hours(conn, ws) == first

        # Day rollups (computed from the GPU hours) still agree with the hours.
        await refresh_day_rollups(conn, datetime.now(UTC) + timedelta(days=2))
        assert not await day_rollups_mismatch(conn, ws)

        # A direct write (an operator's fix, a COPY) keeps them equal too.
        await conn.execute(
            "UPDATE gpu_hour_rollups SET active_us = active_us + 5, idle_us = idle_us - 5 "
            "WHERE workspace_id = %s AND idle_us >= 5",
            [ws],
        )
        await _assert_equal(conn, ws)

        # Retention: a 1-day retention drops every hour here, host hours included.
        await conn.execute("UPDATE workspaces SET retention_days = 1 WHERE id = %s", [ws])
        result = await drop_expired_rollups(conn, min_days=1)
        assert result.host_rows >= len(first)
        cur = await conn.execute(
            "SELECT count(*) FROM host_hour_rollups WHERE workspace_id = %s", [ws]
        )
        assert (await cur.fetchone()) == (0,)
        await _assert_equal(conn, ws)


async def test_migration_backfill_sums_existing_gpu_hours(app, client) -> None:
    """The migration's back-fill statement, run on GPU hours written without the trigger,
    gives the same host hours as the trigger."""
    tenant = await quick_tenant(app)
    await set_max_gap(client, tenant, 900)
    host = await enroll(client, tenant)
    base = days_ago_midnight(1)
    for minute in range(0, 130, 10):
        body = observation(base + timedelta(minutes=minute), [gpu(0, util=50), gpu(1)])
        assert (await push(client, host["agentToken"], body)).status_code == 202
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        by_trigger = await host_hours(conn, ws)
        assert by_trigger
        await conn.execute("DELETE FROM host_hour_rollups WHERE workspace_id = %s", [ws])
        await conn.execute(
            f"INSERT INTO host_hour_rollups (workspace_id, host_id, hour_start, {SUMS}) "
            f"SELECT workspace_id, host_id, hour_start, "
            + ", ".join(f"sum({c})" for c in SUMS.split(", "))
            + " FROM gpu_hour_rollups WHERE workspace_id = %s GROUP BY 1, 2, 3",
            [ws],
        )
        assert await host_hours(conn, ws) == by_trigger
