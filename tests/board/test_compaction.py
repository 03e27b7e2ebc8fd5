"""Compaction of closed days (board.observations.compaction): every reader of the raw
history sees the same observations before and after, late points land in compacted
hours and are merged by the next run, and the migration converts the old tables."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from alembic import command

from board.db.migrate import alembic_config
from board.db.urls import libpq_url
from board.ingest.history import RawKey, neighbourhoods
from board.observations.compaction import RECORD_FIELDS, compact_closed_days
from board.observations.maintenance import run_maintenance
from board.observations.tables import host_observations
from board.rollups.rebuild import rebuild
from tests.board.builders import enroll, push
from tests.board.test_reports_builders import (
    days_ago_midnight,
    gpu,
    observation,
    proc,
    quick_tenant,
    rollup_rows,
    set_max_gap,
    workspace_id,
)

MINUTES = (-30, -25, -20, -10, 0, 5, 25, 30, 60, 65, 125)


def _url(app: Any) -> str:
    return libpq_url(app.state.runtime.database_url)


async def _series(app: Any, client: Any) -> tuple[Any, Any, datetime]:
    """Two hosts' observations across a closed midnight, partial ones and a gap among them."""
    tenant = await quick_tenant(app)
    await set_max_gap(client, tenant, 600)
    d = days_ago_midnight(2)
    held = [gpu(0, util=90, state="active", procs=[proc("hank"), proc("ida")]), gpu(1)]
    partial = [*held, gpu(2, util=60, procs=[proc("eve", ptype="graphics")])]
    hosts = [await enroll(client, tenant, f"node-{i}") for i in range(2)]
    for host in hosts:
        for i, minutes in enumerate(MINUTES):
            body = observation(d + timedelta(minutes=minutes), partial if i % 2 else held)
            if i % 2:
                body["collectionStatus"] = "partial"
                body["errors"] = ["process_list_unavailable"]
            assert (await push(client, host["agentToken"], body)).status_code == 202
    return tenant, hosts, d


async def _seen(conn: psycopg.AsyncConnection[Any], ws: int, d: datetime) -> list[Any]:
    """What readers get: every field of every observation, the per-sample views, and the
    readers' function over windows whose bounds fall on, between and across hours."""
    seen: list[Any] = []
    for query in (
        "SELECT * FROM raw_history WHERE workspace_id = %s ORDER BY host_id, observed_at",
        "SELECT * FROM gpu_samples WHERE workspace_id = %s ORDER BY 1, 2, 3, 4",
        "SELECT * FROM process_samples WHERE workspace_id = %s ORDER BY 1, 2, 3, 4, 5",
    ):
        cur = await conn.execute(query, [ws])
        seen.append(await cur.fetchall())
    cur = await conn.execute("SELECT id FROM hosts WHERE workspace_id = %s ORDER BY id", [ws])
    host_ids = [int(r[0]) for r in await cur.fetchall()]
    for host_id in host_ids:
        for lo, hi in ((-30, 125), (-25, -25), (-11, 0), (0, 59), (5, 61), (26, 200)):
            a, b = d + timedelta(minutes=lo), d + timedelta(minutes=hi)
            cur = await conn.execute(
                "SELECT * FROM raw_observations(%s, %s, %s, %s) ORDER BY observed_at",
                [ws, host_id, a, b],
            )
            seen.append(await cur.fetchall())
    # A late point's neighbours at, between, before and after stored times.
    points = [
        RawKey(ws, host_id, d + timedelta(minutes=m, seconds=s))
        for host_id in host_ids
        for m in (-31, -30, -26, -25, -1, 0, 1, 59, 60, 61, 125, 126, 300)
        for s in (0, 30)
    ]
    seen.append(sorted((await neighbourhoods(conn, points)).items()))
    return seen


async def _hot_rows(conn: psycopg.AsyncConnection[Any], ws: int) -> int:
    cur = await conn.execute("SELECT count(*) FROM host_observations WHERE workspace_id = %s", [ws])
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


def test_record_fields_are_the_hot_columns() -> None:
    assert tuple(c.name for c in host_observations.columns)[2:] == RECORD_FIELDS


async def test_record_type_has_the_same_fields(app) -> None:
    async with await psycopg.AsyncConnection.connect(_url(app)) as conn:
        cur = await conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'observation_record'::regclass "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        )
        assert tuple(r[0] for r in await cur.fetchall()) == RECORD_FIELDS


async def test_compaction_changes_nothing_readers_see(app, client) -> None:
    tenant, _, d = await _series(app, client)
    async with await psycopg.AsyncConnection.connect(_url(app), autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        before = await _seen(conn, ws, d)
        rollups = await rollup_rows(conn, ws)
        assert await _hot_rows(conn, ws) == 2 * len(MINUTES)

        result = await compact_closed_days(conn)
        assert result.observations >= 2 * len(MINUTES)
        assert {(d - timedelta(days=1)).date(), d.date()} <= set(result.days)
        assert await _hot_rows(conn, ws) == 0
        cur = await conn.execute(
            "SELECT count(*), sum(cardinality(records)) FROM observation_hours "
            "WHERE workspace_id = %s",
            [ws],
        )
        # 2 hosts × hours 23:00, 00:00, 01:00 and 02:00.
        assert await cur.fetchone() == (8, 2 * len(MINUTES))
        assert await _seen(conn, ws, d) == before

        # The rollups rebuilt from the compacted hours are the ones ingest kept.
        async with conn.transaction():
            await rebuild(conn, ws, d - timedelta(hours=1), d + timedelta(hours=3))
        assert await rollup_rows(conn, ws) == rollups

        again = await compact_closed_days(conn)
        assert again.observations == 0


async def test_late_point_lands_in_a_compacted_hour_and_is_merged(app, client) -> None:
    tenant, hosts, d = await _series(app, client)
    async with await psycopg.AsyncConnection.connect(_url(app), autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        await compact_closed_days(conn)

        token = hosts[0]["agentToken"]
        # A repeat of a compacted observation is recognized as one.
        repeat = observation(d + timedelta(minutes=5), [gpu(0), gpu(1)])
        answer = await push(client, token, repeat)
        assert answer.status_code == 202
        assert answer.json()["duplicate"] is True
        # A late point in the 20-minute gap (5 → 25) splits it into two credited intervals.
        late = observation(
            d + timedelta(minutes=15),
            [gpu(0, util=50, state="active", procs=[proc("hank")]), gpu(1)],
        )
        answer = await push(client, token, late)
        assert answer.status_code == 202
        assert answer.json()["duplicate"] is False
        assert await _hot_rows(conn, ws) == 1

        incremental = await rollup_rows(conn, ws)
        seen = await _seen(conn, ws, d)
        async with conn.transaction():
            await rebuild(conn, ws, d - timedelta(hours=1), d + timedelta(hours=3))
        assert await rollup_rows(conn, ws) == incremental

        merged = await compact_closed_days(conn)
        assert merged.observations == 1
        assert await _hot_rows(conn, ws) == 0
        cur = await conn.execute(
            "SELECT c.observed_ats, c.first_at, c.last_at, "
            "       array(SELECT r.observed_at FROM unnest(c.records) r) "
            "FROM observation_hours c JOIN hosts h ON h.id = c.host_id "
            "WHERE c.workspace_id = %s AND h.public_id = %s AND c.hour_start = %s",
            [ws, hosts[0]["hostId"], d],
        )
        times, first, last, record_times = await cur.fetchone()
        expected = [d + timedelta(minutes=m) for m in (0, 5, 15, 25, 30)]
        assert times == record_times == expected
        assert (first, last) == (expected[0], expected[-1])
        assert await _seen(conn, ws, d) == seen


async def test_silent_host_still_shows_its_newest_gpus(app, client) -> None:
    tenant, hosts, _ = await _series(app, client)
    path = f"/api/v1/workspaces/{tenant.slug}/hosts/{hosts[0]['hostId']}"
    before = (await client.get(path, headers=tenant.auth("admin"))).json()
    assert len(before["gpus"]) == 2
    async with await psycopg.AsyncConnection.connect(_url(app), autocommit=True) as conn:
        await compact_closed_days(conn)
    after = (await client.get(path, headers=tenant.auth("admin"))).json()
    assert after["gpus"] == before["gpus"]
    assert after["gpus"][0]["processes"]


async def test_only_days_over_for_the_grace_are_compacted(app, client) -> None:
    tenant = await quick_tenant(app)
    host = await enroll(client, tenant)
    recent = datetime.now(UTC) - timedelta(minutes=5)
    assert (await push(client, host["agentToken"], observation(recent, [gpu(0)]))).status_code
    async with await psycopg.AsyncConnection.connect(_url(app), autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        result = await compact_closed_days(conn)
        assert recent.date() not in result.days
        assert await _hot_rows(conn, ws) == 1


_OLD_ROWS = """
INSERT INTO host_observations VALUES
    (7, 70, '{at}', '{at}', 'partial', '{{process_list_unavailable}}', '1.8.0', '550.1'),
    (7, 70, '{later}', '{later}', 'error', '{{nvml_unavailable}}', '1.8.0', '550.1');
INSERT INTO gpu_samples VALUES
    (7, 70, '{at}', 701, 1, 0, 10, 80000, NULL, 300, NULL, 'idle'),
    (7, 70, '{at}', 700, 0, 99, 60000, 80000, 61, NULL, 'active', 'active');
INSERT INTO process_samples VALUES
    (7, 70, '{at}', 700, 42, 'ann', 'python "x,y"', 'compute', 512),
    (7, 70, '{at}', 700, 41, 'bob', 'Xorg', 'graphics', NULL),
    (7, 70, '{at}', 701, 43, 'ann', 'python', 'compute', 1);
"""


def test_migration_converts_the_old_tables_and_back(database_url: str) -> None:
    config = alembic_config(database_url)
    command.downgrade(config, "a21c0d7e5b10")
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(_OLD_ROWS.format(at=at.isoformat(), later=(at + timedelta(seconds=30))))
        old = [
            conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2, 3, 4, 5").fetchall()
            for t in ("host_observations", "gpu_samples", "process_samples")
        ]
    command.upgrade(config, "head")
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT gpu_id, gpu_index, gpu_util_pct, gpu_temperature_c, gpu_power_w, "
            "gpu_reported_state, process_gpu_id, process_pid, process_name "
            "FROM host_observations ORDER BY observed_at"
        ).fetchall()
        assert row[0] == (
            [700, 701], [0, 1], [99, 0], [61, None], [None, 300], ["active", None],
            [700, 700, 701], [41, 42, 43], ["Xorg", 'python "x,y"', "python"],
        )  # fmt: skip
        assert row[1] == ([], [], [], [], [], [], [], [], [])
        gpus = conn.execute("SELECT * FROM gpu_samples ORDER BY 1, 2, 3, 4").fetchall()
        processes = conn.execute("SELECT * FROM process_samples ORDER BY 1, 2, 3, 4, 5").fetchall()
        observations = conn.execute(
            "SELECT workspace_id, host_id, observed_at, received_at, collection_status, errors, "
            "agent_version, driver_version FROM raw_history ORDER BY 1, 2, 3"
        ).fetchall()
    assert [observations, gpus, processes] == old
    command.downgrade(config, "a21c0d7e5b10")
    with psycopg.connect(database_url) as conn:
        back = [
            conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2, 3, 4, 5").fetchall()
            for t in ("host_observations", "gpu_samples", "process_samples")
        ]
    assert back == old
    command.upgrade(config, "head")


async def test_retention_deletes_compacted_hours_of_dropped_days(app, client) -> None:
    tenant, _, d = await _series(app, client)
    async with await psycopg.AsyncConnection.connect(_url(app), autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        await compact_closed_days(conn)
        # Keep the series' second day (d), drop the first (the hour before midnight).
        result = await run_maintenance(
            conn, retention_days=2, ahead_days=1, today=d.date() + timedelta(days=2)
        )
        assert result.compacted_hours_deleted >= 2
        cur = await conn.execute(
            "SELECT DISTINCT hour_start FROM observation_hours WHERE workspace_id = %s ORDER BY 1",
            [ws],
        )
        assert [r[0] for r in await cur.fetchall()] == [d + timedelta(hours=h) for h in range(3)]
