"""`gua-board rollups rebuild` rebuilds the reservation figures too, to what ingest credited."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from board.cli.rollups import rebuild_command
from board.db.urls import libpq_url
from board.reservations.figures import figure_rows
from tests.board.builders import enroll
from tests.board.reservation_builders import MINUTE, book_at, cancel_at, push_series
from tests.board.test_reports_builders import days_ago_midnight, quick_tenant, workspace_id

KINDS = ["used"] * 30 + ["idle_held"] * 20 + ["conflict"] * 20 + ["unused"] * 20


async def _figures(conn: psycopg.AsyncConnection[Any], ws: int) -> list[tuple[Any, ...]]:
    """Both kinds: partial hours (reservation_hour_figures) and whole ones (booked_*)."""
    far = datetime.now(UTC) - timedelta(days=7)
    rows = await figure_rows(conn, ws, far, far + timedelta(days=14))
    return [row for row in rows if row[3] != 0]


async def test_rebuild_equals_the_ingest_time_figures(app, client, settings, capsys) -> None:
    tenant = await quick_tenant(app, "resv")
    start = days_ago_midnight(1) - timedelta(minutes=30)  # across midnight and 2 hours
    before = await enroll(client, tenant, "booked-before")
    after = await enroll(client, tenant, "booked-after")
    await push_series(client, before["agentToken"], start - 2 * MINUTE, ["unused"])
    await book_at(
        app,
        tenant,
        start - MINUTE,
        hostId=before["hostId"],
        start=start.isoformat(),
        end=(start + 90 * MINUTE).isoformat(),
        linuxUsers=["alice"],
    )
    await push_series(client, before["agentToken"], start, [*KINDS, "unused"])
    await push_series(client, after["agentToken"], start, [*KINDS, "unused"])
    # Made after its data arrived, then cancelled while running: both re-credited.
    late = await book_at(
        app,
        tenant,
        start + 4 * MINUTE,
        hostId=after["hostId"],
        start=start.isoformat(),
        end=(start + 90 * MINUTE).isoformat(),
        linuxUsers=["alice"],
    )
    await cancel_at(app, tenant, late.reservation_id, start + 50 * MINUTE)

    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        good = await _figures(conn, ws)
        assert len({row[0] for row in good}) == 2
        assert len({row[2] for row in good}) == 2  # 23:00 and 00:00
        await conn.execute(
            "UPDATE reservation_hour_figures SET used_us = used_us + 7 WHERE workspace_id = %s",
            [ws],
        )
        await conn.execute(
            "DELETE FROM reservation_hour_figures WHERE workspace_id = %s "
            "AND hour_start = (SELECT min(hour_start) FROM reservation_hour_figures)",
            [ws],
        )
        assert await _figures(conn, ws) != good

        args = argparse.Namespace(workspace=tenant.slug, from_=None, to=None)
        assert await asyncio.to_thread(rebuild_command, args, settings) == 0
        assert "reservation-hour rows" in capsys.readouterr().out
        assert await _figures(conn, ws) == good

        # A window of one day (the one after midnight) rebuilds its hours alone, alike.
        day = start + 30 * MINUTE
        await conn.execute(
            "UPDATE reservation_hour_figures SET used_us = 0 WHERE workspace_id = %s", [ws]
        )
        await conn.execute(
            "UPDATE gpu_hour_rollups SET booked_used_us = 0 WHERE workspace_id = %s", [ws]
        )
        args = argparse.Namespace(
            workspace=tenant.slug,
            from_=day.date().isoformat(),
            to=(day + timedelta(days=1)).date().isoformat(),
        )
        assert await asyncio.to_thread(rebuild_command, args, settings) == 0
        rebuilt = await _figures(conn, ws)
        assert [r for r in rebuilt if r[2] >= day] == [r for r in good if r[2] >= day]
        assert all(r[4] == 0 for r in rebuilt if r[2] < day)  # outside: left alone
