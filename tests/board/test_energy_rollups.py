"""Energy in the rollups (accounting.md, "Energy and carbon"), with hand-computed figures.

An interval of d µs opened by an observation reporting p watts adds p × d µJ to its GPU
hour under the GPU's state, and d to the hour's energy-covered time; an opener without a
power reading adds covered time but no energy; a gap adds nothing. A user's share is
split like held time (1/k each of k compute users; `unknown` for a held GPU naming
none). Then the same through the agent API: ingest equals a rebuild from raw, and the
back-fill of history credited before energy gives the same figures.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg

from board.db.urls import libpq_url
from board.ingest.schemas import MAX_POWER_W
from board.reservations.rebuild import rebuild_hours
from board.rollups.crediting import GPU_COLUMNS, USER_COLUMNS, GpuTick, RollupDelta, Tick
from board.workspaces.energy_backfill import backfill_energy
from tests.board.builders import enroll, push
from tests.board.test_reports_builders import (
    days_ago_midnight,
    gpu,
    observation,
    proc,
    quick_tenant,
    rollup_rows,
    workspace_id,
)

HOUR_US = 3_600_000_000
MINUTE = 60_000_000
GAP = 120_000_000


def _gpu_row(delta: RollupDelta, gpu_id: int, hour: int = 10) -> dict[str, int]:
    return dict(zip(GPU_COLUMNS, delta.gpu[(7, gpu_id, hour * HOUR_US)], strict=True))


def _user_row(delta: RollupDelta, gpu_id: int, user: str, hour: int = 10) -> dict[str, int]:
    return dict(zip(USER_COLUMNS, delta.user[(7, gpu_id, user, hour * HOUR_US)], strict=True))


def test_a_minute_at_300_watts_is_five_watt_hours() -> None:
    opener = Tick(7, 10 * HOUR_US, (GpuTick(1, "active", 90, 1, 2, ("alice",), 300),))
    delta = RollupDelta()
    delta.credit(opener, opener.observed_us + MINUTE, GAP)
    row = _gpu_row(delta, 1)
    assert row["energy_covered_us"] == MINUTE
    assert row["active_energy_uws"] == 300 * MINUTE  # 18,000 J = 5 Wh = 0.005 kWh
    assert row["active_energy_uws"] / 3.6e12 == 0.005
    assert row["idle_held_energy_uws"] == row["idle_energy_uws"] == 0
    user = _user_row(delta, 1, "alice")
    assert (user["energy_held_us"], user["active_energy_uws"]) == (MINUTE, 300 * MINUTE)


def test_no_power_reading_is_covered_time_without_energy() -> None:
    opener = Tick(7, 10 * HOUR_US, (GpuTick(1, "idle_held", 0, 1, 2, ("bob",), None),))
    delta = RollupDelta()
    delta.credit(opener, opener.observed_us + MINUTE, GAP)
    row = _gpu_row(delta, 1)
    assert row["covered_us"] == MINUTE
    assert row["energy_covered_us"] == 0
    assert row["idle_held_energy_uws"] == 0
    assert _user_row(delta, 1, "bob")["energy_held_us"] == 0


def test_a_gap_adds_no_energy() -> None:
    opener = Tick(7, 10 * HOUR_US, (GpuTick(1, "active", 90, 1, 2, ("alice",), 300),))
    delta = RollupDelta()
    delta.credit(opener, opener.observed_us + GAP + 1, GAP)
    assert delta.gpu == {}
    assert delta.user == {}


def test_two_holders_split_the_energy_like_the_time() -> None:
    # 90 s idle-held at 61 W by alice and bob, crossing 11:00: 30 s in hour 10, 60 s in 11.
    start = 11 * HOUR_US - 30_000_000
    opener = Tick(7, start, (GpuTick(1, "idle_held", 0, 1, 2, ("alice", "bob"), 61),))
    delta = RollupDelta()
    delta.credit(opener, start + 90_000_000, GAP)
    assert _gpu_row(delta, 1, 10)["idle_held_energy_uws"] == 61 * 30_000_000
    assert _gpu_row(delta, 1, 11)["idle_held_energy_uws"] == 61 * 60_000_000
    for user in ("alice", "bob"):
        assert _user_row(delta, 1, user, 10)["idle_held_energy_uws"] == 61 * 15_000_000
        assert _user_row(delta, 1, user, 11)["idle_held_energy_uws"] == 61 * 30_000_000
        assert _user_row(delta, 1, user, 11)["energy_held_us"] == 30_000_000
    # An idle GPU's energy is the GPU's (idle), nobody's.
    idle = Tick(7, 10 * HOUR_US, (GpuTick(2, "idle", 0, 1, 2, (), 55),))
    delta.credit(idle, idle.observed_us + MINUTE, GAP)
    assert _gpu_row(delta, 2)["idle_energy_uws"] == 55 * MINUTE
    assert not any(key[1] == 2 for key in delta.user)


def test_uncrediting_is_exact_with_energy() -> None:
    opener = Tick(7, 10 * HOUR_US, (GpuTick(1, "active", 90, 1, 2, ("a", "b", "c"), 333),))
    delta = RollupDelta()
    delta.credit(opener, opener.observed_us + 100_000_001, GAP)
    delta.credit(opener, opener.observed_us + 100_000_001, GAP, sign=-1)
    assert all(v == 0 for row in delta.gpu.values() for v in row)
    assert all(v == 0 for row in delta.user.values() for v in row)


async def _energy(conn: psycopg.AsyncConnection[Any], ws: int) -> tuple[int, int, int]:
    cur = await conn.execute(
        "SELECT sum(energy_covered_us)::bigint, sum(active_energy_uws)::bigint, "
        "sum(idle_held_energy_uws)::bigint FROM gpu_hour_rollups WHERE workspace_id = %s",
        [ws],
    )
    row = await cur.fetchone()
    assert row is not None
    return row[0], row[1], row[2]


async def test_ingest_rebuild_and_backfill_agree(app: Any, client: Any) -> None:
    """Pushed out of order with a null reading among them: 60 s at 250 W active by alice,
    60 s with no reading, 60 s at 80 W idle-held by bob; the figures by hand, the same
    after a rebuild, and the same again from a back-fill after the energy is wiped."""
    tenant = await quick_tenant(app, "energy")
    host = await enroll(client, tenant, "node-e")
    base = days_ago_midnight(1) + timedelta(hours=5)
    bodies = [
        observation(base, [gpu(0, util=90, state="active", procs=[proc("alice")], power=250)]),
        observation(
            base + timedelta(seconds=60),
            [gpu(0, util=90, state="active", procs=[proc("alice")], power=None)],
        ),
        observation(
            base + timedelta(seconds=120),
            [gpu(0, util=0, state="idle_held", procs=[proc("bob")], power=80)],
        ),
        observation(base + timedelta(seconds=180), [gpu(0, util=0, state="idle", power=40)]),
    ]
    for body in (bodies[2], bodies[0], bodies[3], bodies[1]):
        r = await push(client, host["agentToken"], body)
        assert r.status_code == 202, r.text
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url) as conn:
        ws = await workspace_id(conn, tenant.slug)
        assert await _energy(conn, ws) == (2 * MINUTE, 250 * MINUTE, 80 * MINUTE)
        cur = await conn.execute(
            "SELECT linux_user, energy_held_us, active_energy_uws, idle_held_energy_uws "
            "FROM user_hour_rollups WHERE workspace_id = %s ORDER BY 1",
            [ws],
        )
        assert await cur.fetchall() == [
            ("alice", MINUTE, 250 * MINUTE, 0),
            ("bob", MINUTE, 0, 80 * MINUTE),
        ]
        incremental = await rollup_rows(conn, ws)
        hour = base.replace(minute=0, second=0, microsecond=0)
        async with conn.transaction():
            await rebuild_hours(conn, ws, hour, hour + timedelta(hours=1))
        assert await rollup_rows(conn, ws) == incremental

        # As if credited before energy existed: the back-fill replays raw for it.
        await conn.execute(
            "UPDATE gpu_hour_rollups SET energy_covered_us = 0, active_energy_uws = 0, "
            "idle_held_energy_uws = 0, idle_energy_uws = 0 WHERE workspace_id = %s",
            [ws],
        )
        await conn.execute(
            "UPDATE user_hour_rollups SET energy_held_us = 0, active_energy_uws = 0, "
            "idle_held_energy_uws = 0 WHERE workspace_id = %s",
            [ws],
        )
        await conn.execute(
            "UPDATE workspaces SET energy_backfill_until = %s WHERE id = %s",
            [hour + timedelta(hours=2), ws],
        )
        await conn.commit()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        assert await backfill_energy(conn) >= 1
        assert await rollup_rows(conn, ws) == incremental
        cur = await conn.execute("SELECT energy_backfill_until FROM workspaces WHERE id = %s", [ws])
        assert await cur.fetchone() == (None,)
        assert await backfill_energy(conn) == 0


async def test_a_draw_no_gpu_has_is_no_reading(app: Any, client: Any) -> None:
    """Eight cards reporting 2**31-1 W for an hour overflowed their host's hour in bigint
    within nine minutes (every later push a 503). Above 10 kW a reading is taken as none:
    every push is stored, the time counts, no energy does; 10 kW itself is a reading."""
    tenant = await quick_tenant(app, "energy-bounds")
    host = await enroll(client, tenant, "node-big")
    base = days_ago_midnight(1) + timedelta(hours=5)
    for second in range(0, 3_660, 60):
        cards = [gpu(k, util=90, state="active", power=2**31 - 1) for k in range(7)]
        cards.append(gpu(7, util=90, state="active", power=MAX_POWER_W))
        r = await push(
            client, host["agentToken"], observation(base + timedelta(seconds=second), cards)
        )
        assert r.status_code == 202, r.text
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url) as conn:
        ws = await workspace_id(conn, tenant.slug)
        cur = await conn.execute(
            "SELECT g.gpu_index, sum(r.covered_us), sum(r.energy_covered_us), "
            "sum(r.active_energy_uws) FROM gpu_hour_rollups r JOIN gpus g "
            "ON g.workspace_id = r.workspace_id AND g.id = r.gpu_id "
            "WHERE r.workspace_id = %s GROUP BY 1 ORDER BY 1",
            [ws],
        )
        rows = await cur.fetchall()
    assert [row[0] for row in rows] == list(range(8))
    an_hour = 60 * MINUTE  # 61 pushes a minute apart
    for index, covered, energy_covered, active_uws in rows:
        assert covered == an_hour
        if index < 7:
            assert (energy_covered, active_uws) == (0, 0)
        else:
            assert (energy_covered, active_uws) == (
                an_hour,
                MAX_POWER_W * an_hour,
            )
    hosts = await client.get(f"/api/v1/workspaces/{tenant.slug}/hosts", headers=tenant.auth())
    powers = [g["powerW"] for g in hosts.json()["hosts"][0]["gpus"]]
    assert powers == [None] * 7 + [MAX_POWER_W]
