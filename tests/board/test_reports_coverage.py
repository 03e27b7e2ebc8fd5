"""The covered GPU-hours every usage report states (`coverage.coveredGpuHours`): the
window's clean whole UTC days from the day totals, and every other hour of it (the edge
hours of a zone's days, a day changed since its day rows) from the hour rows, named one
by one (board.reports.repository.rollup_rows). Whatever the zone, the grouping or the
mix of day rows and hours, it is the sum of the window's hours.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from board.db.urls import libpq_url
from board.reportkit import params
from tests.board.builders import make_tenant
from tests.board.test_reports_builders import report, workspace_id
from tests.board.test_reports_zones import FIRST, HOUR_US, HOURS, seeded, us

# A UTC day inside November whose hours change after its day rows were made: its rows
# are stale (the day is dirty), so the reports read its hours.
CHANGED_DAY = datetime(2026, 11, 12, tzinfo=UTC)
CHANGED_COVERED_US = HOUR_US // 4


def covered_us(hour: datetime) -> int:
    changed = CHANGED_DAY <= hour < CHANGED_DAY + timedelta(days=1)
    return CHANGED_COVERED_US if changed else HOUR_US


def expected_us(window: params.Window) -> int:
    hours = (FIRST + timedelta(hours=i) for i in range(HOURS))
    return sum(covered_us(h) for h in hours if window.start <= h < window.end)


async def change_a_day(app: Any, slug: str) -> None:
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        ws = await workspace_id(conn, slug)
        await conn.execute(
            "UPDATE gpu_hour_rollups SET covered_us = %s, idle_us = %s "
            "WHERE workspace_id = %s AND hour_start >= %s AND hour_start < %s",
            [CHANGED_COVERED_US, CHANGED_COVERED_US, ws, CHANGED_DAY, CHANGED_DAY + timedelta(1)],
        )
        cur = await conn.execute(
            "SELECT count(*) FROM rollup_dirty_days WHERE workspace_id = %s AND day_start = %s",
            [ws, CHANGED_DAY],
        )
        assert await cur.fetchone() == (1,)  # the change marked the day


@pytest.mark.parametrize(
    "zone",
    # Edge hours at both ends (+01:00), half-hour days (+05:30), none at all (UTC).
    ["Europe/Berlin", "Asia/Kolkata", "America/New_York", "UTC"],
)
async def test_covered_total_is_the_sum_of_the_windows_hours(
    app: Any, client: httpx.AsyncClient, zone: str
) -> None:
    tenant = await make_tenant(app, "coverage")
    await seeded(app, client, tenant)
    await change_a_day(app, tenant.slug)
    windows = [
        ("2026-11-01", "2026-12-01"),  # a month: edge hours and the changed day
        ("2026-11-05", "2026-11-09"),  # clean days and edge hours only
        ("2026-11-12", "2026-11-13"),  # the changed day alone
        ("2026-10-30", "2026-12-02"),  # past the seeded hours' first day
    ]
    for first, following in windows:
        window = params.parse_window(first, following, zone)
        expected = expected_us(window)
        query = {"from": first, "to": following, "tz": zone}
        for group in ("user", "team", "host", "day", "month", "user,day"):
            body = await report(client, tenant, "usage", groupBy=group, **query)
            assert us(body["coverage"]["coveredGpuHours"]) == expected, (first, group)
            if group in ("host", "day", "month"):
                # ... and the rows' covered time, summed by other statements, agrees.
                assert sum(us(r["coveredGpuHours"]) for r in body["rows"]) == expected
