"""Retention: raw partitions go on their own schedule and never touch rollups; rollups
older than a workspace's retentionDays, and than the operator's floor, are deleted by the
maintenance schedule (so is the audit log)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from board.db.urls import libpq_url
from board.maintenance import maintain_once
from board.observations.maintenance import run_maintenance
from tests.board.builders import enroll, push
from tests.board.test_reports_builders import (
    day_rollups_mismatch,
    days_ago_midnight,
    gpu,
    observation,
    proc,
    quick_tenant,
    report,
    rollup_rows,
    workspace_id,
)


def _url(app: Any) -> str:
    return libpq_url(app.state.runtime.database_url)


async def test_dropping_raw_partitions_keeps_rollups(app, client) -> None:
    tenant = await quick_tenant(app)
    host = await enroll(client, tenant)
    d = days_ago_midnight(3)
    held = [gpu(0, util=90, state="active", procs=[proc("erin")])]
    for minutes in range(0, 5):
        body = observation(d + timedelta(minutes=minutes), held)
        assert (await push(client, host["agentToken"], body)).status_code == 202
    window = {"from": d.date().isoformat(), "to": (d + timedelta(days=1)).date().isoformat()}
    before = await report(client, tenant, "usage", **window)
    assert before["totals"]["heldGpuHours"] == round(4 / 60, 6)

    async with await psycopg.AsyncConnection.connect(_url(app), autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        rollups = await rollup_rows(conn, ws)
        # Forty days on, every partition holding these samples is past the raw retention.
        today = datetime.now(UTC).date() + timedelta(days=40)
        result = await run_maintenance(conn, retention_days=35, ahead_days=3, today=today)
        assert any(name.startswith("host_observations_p") for name in result.dropped)
        cur = await conn.execute(
            "SELECT count(*) FROM host_observations WHERE workspace_id = %s", [ws]
        )
        assert (await cur.fetchone()) == (0,)
        assert await rollup_rows(conn, ws) == rollups
        assert await day_rollups_mismatch(conn, ws) == []
    assert await report(client, tenant, "usage", **window) == before


async def _insert_hours(conn: psycopg.AsyncConnection[Any], ws: int, hours: list[datetime]) -> None:
    await conn.execute(
        """
        INSERT INTO gpu_hour_rollups (workspace_id, gpu_id, hour_start, host_id, covered_us,
            active_us, idle_held_us, idle_us, util_pct_us, memory_used_mb_us,
            memory_total_mb_us, sample_count)
        SELECT %s, 1, h, 1, 3600000000, 0, 0, 3600000000, 0, 0, 3600000000, 120
        FROM unnest(%s::timestamptz[]) AS h
        """,
        [ws, hours],
    )
    await conn.execute(
        """
        INSERT INTO user_hour_rollups (workspace_id, gpu_id, linux_user, hour_start, host_id,
            held_us, active_us, idle_held_us)
        SELECT %s, 1, 'frank', h, 1, 3600000000, 0, 3600000000
        FROM unnest(%s::timestamptz[]) AS h
        """,
        [ws, hours],
    )


async def _hours(conn: psycopg.AsyncConnection[Any], ws: int, table: str) -> list[datetime]:
    column = "day_start" if "day" in table else "hour_start"
    cur = await conn.execute(
        f"SELECT {column} FROM {table} WHERE workspace_id = %s ORDER BY 1", [ws]
    )
    return [r[0] for r in await cur.fetchall()]


async def test_maintenance_deletes_rollups_past_each_workspace_retention(app, client) -> None:
    default, longer = await quick_tenant(app), await quick_tenant(app)
    r = await client.patch(
        f"/api/v1/workspaces/{longer.slug}/settings",
        json={"retentionDays": 500},
        headers=longer.auth(),
    )
    assert r.status_code == 200, r.text
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    async with await psycopg.AsyncConnection.connect(_url(app), autocommit=True) as conn:
        ws_default = await workspace_id(conn, default.slug)
        ws_longer = await workspace_id(conn, longer.slug)
        old, kept = now - timedelta(days=402), now - timedelta(days=398)
        await _insert_hours(conn, ws_default, [old, old + timedelta(hours=1), kept])
        await _insert_hours(conn, ws_longer, [now - timedelta(days=502), old])

        await maintain_once(app.state.runtime)

        assert await _hours(conn, ws_default, "gpu_hour_rollups") == [kept]
        assert await _hours(conn, ws_default, "user_hour_rollups") == [kept]
        assert await _hours(conn, ws_longer, "gpu_hour_rollups") == [old]
        assert await _hours(conn, ws_longer, "user_hour_rollups") == [old]
        # The day rows of fully expired days are gone, the others still equal their hours.
        assert len(await _hours(conn, ws_default, "gpu_day_rollups")) == 1
        for ws in (ws_default, ws_longer):
            assert await day_rollups_mismatch(conn, ws) == []


async def _age_audit_entries(conn: psycopg.AsyncConnection[Any], ws: int, ages: list[int]) -> None:
    """One more audit entry per age in days (an admin action as maintenance finds it)."""
    for days in ages:
        await conn.execute(
            "INSERT INTO audit_events (workspace_id, action, target, detail, client_address, at) "
            "VALUES (%s, 'host.revoked', %s, '{}', '127.0.0.1', "
            "now() - make_interval(days => %s))",
            [ws, f"aged-{days}", days],
        )


async def _audit_targets(conn: psycopg.AsyncConnection[Any], ws: int) -> set[str]:
    cur = await conn.execute(
        "SELECT target FROM audit_events WHERE workspace_id = %s AND target LIKE 'aged-%%'",
        [ws],
    )
    return {row[0] for row in await cur.fetchall()}


async def test_a_one_day_retention_cannot_erase_the_trail_or_the_billing(app, client) -> None:
    """retentionDays=1 used to make the next maintenance run delete the audit log and the
    rollups finance bills from; both are now kept the operator's floor (400 days)."""
    tenant = await quick_tenant(app)
    floor = app.state.runtime.settings.min_retention_days
    assert floor == 400
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings",
        json={"retentionDays": 1},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    assert r.json()["retentionDays"] == 1
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    async with await psycopg.AsyncConnection.connect(_url(app), autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        young, old = now - timedelta(days=3), now - timedelta(days=200)
        past_floor = now - timedelta(days=floor + 2)
        await _insert_hours(conn, ws, [past_floor, old, young])
        await _age_audit_entries(conn, ws, [3, 200, floor + 2])

        await maintain_once(app.state.runtime)

        for table in ("gpu_hour_rollups", "user_hour_rollups"):
            assert await _hours(conn, ws, table) == [old, young], table
        assert await _audit_targets(conn, ws) == {"aged-3", "aged-200"}
        assert await day_rollups_mismatch(conn, ws) == []
    # The shortening itself is in the log, from what to what, by whom and from where.
    log = await client.get(f"/api/v1/workspaces/{tenant.slug}/audit-log", headers=tenant.auth())
    changed = [e for e in log.json()["events"] if e["action"] == "settings.changed"]
    assert len(changed) == 1
    assert changed[0]["detail"] == {"retention_days": 1, "previous_retention_days": 400}
    assert changed[0]["actorEmail"] == f"admin@{tenant.slug}.example"
    assert changed[0]["clientAddress"] == "127.0.0.1"
