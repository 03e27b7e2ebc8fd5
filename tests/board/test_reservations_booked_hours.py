"""A booking's whole hours ride on the GPU-hour rows (booked_*), its partial first and
last hours stay in reservation_hour_figures; the report, the rebuild and the migration
see the same figures either way."""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta
from typing import Any

import psycopg
from alembic import command

from board.cli.rollups import rebuild_command
from board.db.migrate import alembic_config
from board.db.urls import libpq_url
from board.reservations.figures import figure_rows
from board.rollups.retention import drop_expired_rollups
from tests.board.builders import enroll
from tests.board.reservation_builders import MINUTE, book_at, push_series, reservation_report
from tests.board.test_reports_builders import days_ago_midnight, quick_tenant, workspace_id

HOUR_US = 3_600_000_000
# 23:30 → 01:30: alice works 30 min, holds the card idle the whole hour 00:00–01:00,
# bob runs on it 20 min, then nobody 10 min (one observation a minute).
KINDS = ["used"] * 30 + ["idle_held"] * 60 + ["conflict"] * 20 + ["unused"] * 10
LENGTH = timedelta(hours=2)
BEFORE_MIGRATION = "a22b4e8f1c20"


def _url(app: Any) -> str:
    return libpq_url(app.state.runtime.database_url)


async def _booked_series(app: Any, client: Any, tenant: Any) -> Any:
    """Two hosts with the series; one booked before its data, one after (re-credited)."""
    start = days_ago_midnight(1) - 30 * MINUTE
    before = await enroll(client, tenant, "booked-before")
    after = await enroll(client, tenant, "booked-after")
    await push_series(client, before["agentToken"], start - 2 * MINUTE, ["unused"])
    booking = {"start": start.isoformat(), "end": (start + LENGTH).isoformat()}
    await book_at(
        app, tenant, start - MINUTE, hostId=before["hostId"], linuxUsers=["alice"], **booking
    )
    await push_series(client, before["agentToken"], start, [*KINDS, "unused"])
    await push_series(client, after["agentToken"], start, [*KINDS, "unused"])
    await book_at(
        app, tenant, start + 4 * MINUTE, hostId=after["hostId"], linuxUsers=["alice"], **booking
    )
    return start


def _window(start: Any) -> dict[str, str]:
    day = start.replace(hour=0, minute=0)
    return {
        "from": (day - timedelta(days=1)).isoformat(),
        "to": (day + timedelta(days=2)).isoformat(),
    }


async def _all_figures(conn: psycopg.AsyncConnection[Any], ws: int, start: Any) -> list[Any]:
    rows = await figure_rows(conn, ws, start - timedelta(days=1), start + timedelta(days=1))
    return [row for row in rows if any(row[3:])]


async def test_whole_hours_write_no_figure_rows_and_report_alike(app: Any, client: Any) -> None:
    tenant = await quick_tenant(app, "booked")
    start = await _booked_series(app, client, tenant)
    midnight = start + 30 * MINUTE

    body = await reservation_report(client, tenant, **_window(start))
    assert len(body["rows"]) == 2
    for row in body["rows"]:
        assert row["reservedGpuHours"] == 2.0
        assert row["coveredGpuHours"] == 2.0
        assert row["usedGpuHours"] == 0.5
        assert row["idleHeldGpuHours"] == 1.0
        assert row["conflictGpuHours"] == round(20 / 60, 6)
        assert row["unusedGpuHours"] == round(10 / 60, 6)
        assert row["usedShare"] == 0.25
    # A window of the whole hour alone reads it from the GPU-hour rows.
    hour = {"from": midnight.isoformat(), "to": (midnight + timedelta(hours=1)).isoformat()}
    (only,) = (await reservation_report(client, tenant, groupBy="member", **hour))["rows"]
    assert only["idleHeldGpuHours"] == 2.0
    assert only["coveredGpuHours"] == 2.0

    async with await psycopg.AsyncConnection.connect(_url(app)) as conn:
        ws = await workspace_id(conn, tenant.slug)
        cur = await conn.execute(
            "SELECT DISTINCT hour_start FROM reservation_hour_figures "
            "WHERE workspace_id = %s AND covered_us <> 0 ORDER BY 1",
            [ws],
        )
        partial = [r[0] for r in await cur.fetchall()]
        assert partial == [midnight - timedelta(hours=1), midnight + timedelta(hours=1)]
        cur = await conn.execute(
            "SELECT hour_start, booked_covered_us, booked_used_us, booked_idle_held_us, "
            "booked_conflict_us, booked_unused_us FROM gpu_hour_rollups "
            "WHERE workspace_id = %s AND booked_covered_us <> 0",
            [ws],
        )
        assert await cur.fetchall() == [(midnight, HOUR_US, 0, HOUR_US, 0, 0)] * 2
        # The host hours (kept by a trigger on GPU hours) still sum the GPU hours.
        cur = await conn.execute(
            """
            SELECT h.host_id, h.hour_start, h.covered_us, g.covered, h.sample_count, g.samples
            FROM host_hour_rollups h
            JOIN (SELECT host_id, hour_start, sum(covered_us) AS covered,
                         sum(sample_count) AS samples
                  FROM gpu_hour_rollups WHERE workspace_id = %(ws)s
                  GROUP BY host_id, hour_start) g USING (host_id, hour_start)
            WHERE h.workspace_id = %(ws)s
            """,
            {"ws": ws},
        )
        hosts = await cur.fetchall()
        assert hosts
        assert all(r[2] == r[3] and r[4] == r[5] for r in hosts)


async def test_rebuild_restores_both_kinds(app: Any, client: Any, settings: Any) -> None:
    tenant = await quick_tenant(app, "booked")
    start = await _booked_series(app, client, tenant)
    async with await psycopg.AsyncConnection.connect(_url(app), autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        good = await _all_figures(conn, ws, start)
        assert len(good) == 6  # 2 bookings x (23:00, 00:00, 01:00)
        await conn.execute(
            "UPDATE gpu_hour_rollups SET booked_used_us = booked_used_us + 7, "
            "booked_covered_us = booked_covered_us + 7 WHERE workspace_id = %s",
            [ws],
        )
        await conn.execute(
            "UPDATE reservation_hour_figures SET used_us = used_us + 7 WHERE workspace_id = %s",
            [ws],
        )
        assert await _all_figures(conn, ws, start) != good
        args = argparse.Namespace(workspace=tenant.slug, from_=None, to=None)
        assert await asyncio.to_thread(rebuild_command, args, settings) == 0
        assert await _all_figures(conn, ws, start) == good


async def test_migration_moves_whole_hour_figures_both_ways(
    app: Any, client: Any, database_url: str
) -> None:
    tenant = await quick_tenant(app, "booked")
    start = await _booked_series(app, client, tenant)
    midnight = start + 30 * MINUTE
    config = alembic_config(database_url)
    async with await psycopg.AsyncConnection.connect(_url(app), autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        good = await _all_figures(conn, ws, start)
        rows_sql = (
            "SELECT reservation_id, gpu_id, hour_start, covered_us, used_us, idle_held_us, "
            "conflict_us, unused_us FROM reservation_hour_figures "
            "WHERE workspace_id = %s AND covered_us <> 0 ORDER BY 1, 2, 3"
        )

        await asyncio.to_thread(command.downgrade, config, BEFORE_MIGRATION)
        cur = await conn.execute(rows_sql, [ws])
        assert await cur.fetchall() == good  # every hour a figure row again
        cur = await conn.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_name = 'gpu_hour_rollups' AND column_name LIKE 'booked%%'"
        )
        assert await cur.fetchone() == (0,)

        await asyncio.to_thread(command.upgrade, config, "head")
        assert await _all_figures(conn, ws, start) == good
        cur = await conn.execute(rows_sql, [ws])
        assert {row[2] for row in await cur.fetchall()} == {
            midnight - timedelta(hours=1),
            midnight + timedelta(hours=1),
        }


async def test_retention_deletes_both_kinds_at_one_cutoff(app: Any, client: Any) -> None:
    tenant = await quick_tenant(app, "booked")
    start = await _booked_series(app, client, tenant)
    async with await psycopg.AsyncConnection.connect(_url(app), autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        await conn.execute("UPDATE workspaces SET retention_days = 1 WHERE id = %s", [ws])
        # 01:00 (a partial hour) ends within the cutoff, 23:00 and 00:00 end before it.
        now = start + timedelta(days=1, hours=2)
        result = await drop_expired_rollups(conn, min_days=1, now=now)
        assert result.figure_rows == 2  # 23:00 of both bookings
        left = await _all_figures(conn, ws, start)
        assert {row[2] for row in left} == {start + timedelta(minutes=90)}
