"""The usage report's `month` key: local calendar months in the report's zone (the hours
that start on the month's local dates), the same bytes from the day rows as from the
hours alone (the UTC days that straddle a local month are read from their hours), the
streamed body equal to the buffered one, with prices and without."""

from __future__ import annotations

import itertools
import random
import secrets
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from board.reportkit import params
from board.reportkit.csv import render_csv
from board.reportkit.figures import hours
from board.reports import groupings, service, stream
from board.runtime import Runtime
from tests.board.budget_builders import set_prices, set_team
from tests.board.builders import Tenant
from tests.board.db import execute, scalar
from tests.board.test_reports_builders import quick_tenant, refresh_all_days
from tests.board.test_reports_rendered import _hour_row, _insert_hours

HOUR_US = 3_600_000_000
# 2026-01-29 .. 2026-03-03 (UTC): two month ends, in zones east and west of UTC.
FIRST = datetime(2026, 1, 29, tzinfo=UTC)
DAYS = 33
USERS = ["ann", "bo ü", "=cy"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"]
WINDOWS = [("2026-01-30", "2026-03-02"), ("2026-01-29T05:00:00Z", "2026-03-02T19:00:00Z")]
GROUPS = ["month", "user,month", "month,user", "team,month", "month,gpu", "host,month", "day,month"]


async def _fleet(app: Any, client: httpx.AsyncClient, priced: bool) -> tuple[Tenant, int, dict]:
    """Two hosts of two GPUs, their hours and their users' hours through the window
    (some hours missing); ann in a team; a `*` price when `priced`; day rows made.
    Returns the tenant, the workspace id and each (user, hour)'s held µs."""
    tenant = await quick_tenant(app, "months")
    ws = int(await scalar(app, "SELECT id FROM workspaces WHERE slug = %s", tenant.slug))
    rng = random.Random(7)
    gpu_rows, user_rows = [], []
    held: dict[tuple[str, datetime], int] = defaultdict(int)
    for h in range(2):
        host_id = await scalar(
            app,
            "INSERT INTO hosts (workspace_id, public_id, display_name, hostname, "
            "agent_token_hash, agent_token_prefix) VALUES (%s, gen_random_uuid(), %s, %s, %s, "
            "'gua_agent_x') RETURNING id",
            ws,
            f"node-{h}",
            f"node-{h}",
            secrets.token_bytes(32),
        )
        for i in range(2):
            gpu_id = await scalar(
                app,
                "INSERT INTO gpus (workspace_id, host_id, uuid, gpu_index, name, memory_total_mb) "
                "VALUES (%s, %s, %s, %s, 'NVIDIA H100', 81559) RETURNING id",
                ws,
                host_id,
                f"GPU-{h}-{i}",
                i,
            )
            for n in range(DAYS * 24):
                if rng.random() < 0.1:
                    continue
                hour = FIRST + timedelta(hours=n)
                gpu_rows.append((ws, gpu_id, hour, host_id, *_hour_row(rng)))
                for user in rng.sample(USERS, rng.choice((1, 2))):
                    us = rng.randrange(1, HOUR_US // 2)
                    held[(user, hour)] += us
                    user_rows.append(
                        (ws, gpu_id, user, hour, host_id, us, us // 3, us - us // 3, us)
                    )
    await _insert_hours(app, gpu_rows)
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn, conn.cursor() as cur:
        await cur.executemany(
            "INSERT INTO user_hour_rollups (workspace_id, gpu_id, linux_user, hour_start, "
            "host_id, held_us, active_us, idle_held_us, energy_held_us, active_energy_uws, "
            "idle_held_energy_uws) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 300 * %s::bigint, 0)",
            [(*r, r[6]) for r in user_rows],
        )
    await set_team(client, tenant, "ann", "vision")
    if priced:
        await set_prices(client, tenant, "1.37")
    await refresh_all_days(app)
    return tenant, ws, held


async def _bodies(app: Any, ws: int) -> dict[tuple[str, ...], bytes]:
    """Every grouping, zone and window, JSON and CSV, as the route streams them."""
    runtime: Runtime = app.state.runtime
    found = {}
    async with runtime.pool.connection() as conn:
        for (start, end), tz, group in itertools.product(WINDOWS, ZONES, GROUPS):
            window = params.parse_window(start, end, tz)
            for fmt in ("json", "csv"):
                keys = groupings.parse_usage_group(group)
                chunks = await stream.prepare_usage(conn, ws, window, keys, fmt)
                found[(start, tz, group, fmt)] = b"".join([c async for c in chunks])
            await conn.commit()
    return found


@pytest.mark.parametrize("priced", [False, True], ids=["no prices", "priced"])
async def test_months_from_day_rows_equal_months_from_hours(app, client, priced) -> None:
    """Clean whole UTC days come from the day rows, except those whose hours start in two
    local months; with every day marked dirty the hours alone give the same bytes."""
    _, ws, _ = await _fleet(app, client, priced)
    from_days = await _bodies(app, ws)
    await execute(
        app,
        "INSERT INTO rollup_dirty_days (workspace_id, day_start) "
        "SELECT DISTINCT workspace_id, day_start FROM gpu_day_rollups WHERE workspace_id = %s "
        "ON CONFLICT DO NOTHING",
        ws,
    )
    from_hours = await _bodies(app, ws)
    assert from_hours.keys() == from_days.keys()
    for key, body in from_days.items():
        assert body == from_hours[key], key


@pytest.mark.parametrize("tz", ZONES)
async def test_a_month_is_the_hours_that_start_on_its_local_dates(app, client, tz) -> None:
    tenant, _, held = await _fleet(app, client, priced=False)
    start, end = WINDOWS[0]
    window = params.parse_window(start, end, tz)
    expected: dict[tuple[str, str], int] = defaultdict(int)
    for (user, hour), us in held.items():
        if window.start <= hour < window.end:
            expected[(user, window.day_of(hour).isoformat()[:7])] += us
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/usage",
        params={"from": start, "to": end, "tz": tz, "groupBy": "user,month"},
        headers=tenant.auth("finance"),
    )
    assert r.status_code == 200, r.text
    got = {(row["user"], row["month"]): row["heldGpuHours"] for row in r.json()["rows"]}
    assert got == {key: hours(us) for key, us in sorted(expected.items())}
    assert {month for _, month in got} == {"2026-01", "2026-02", "2026-03"}


async def test_streamed_months_are_the_buffered_report(app, client) -> None:
    tenant, ws, _ = await _fleet(app, client, priced=True)
    runtime: Runtime = app.state.runtime
    for (start, end), tz, group in itertools.product(WINDOWS, ZONES, GROUPS):
        window = params.parse_window(start, end, tz)
        async with runtime.pool.connection() as conn:
            report = await service.usage_report(
                conn, ws, window, groupings.parse_usage_group(group)
            )
        assert report.rows, (group, tz, start)
        base = f"/api/v1/workspaces/{tenant.slug}/reports/usage"
        query = {"from": start, "to": end, "tz": tz, "groupBy": group}
        r = await client.get(base, params=query, headers=tenant.auth("finance"))
        assert r.content == report.to_json(), (group, tz, start)
        r = await client.get(base, params={**query, "format": "csv"}, headers=tenant.auth())
        assert r.text == render_csv(report), (group, tz, start)


@pytest.mark.parametrize(
    ("tz", "straddling"),
    [
        ("UTC", []),
        ("Europe/Berlin", ["2026-01-31", "2026-02-28"]),  # a month starts at 23:00 UTC
        ("America/New_York", ["2026-02-01", "2026-03-01"]),  # at 05:00 UTC
        ("Asia/Kolkata", ["2026-01-31", "2026-02-28"]),  # its hour from 18:30 UTC
    ],
)
def test_utc_days_across_local_months(tz: str, straddling: list[str]) -> None:
    window = params.parse_window("2026-01-20", "2026-03-10", tz)
    d0, d1 = window.whole_utc_days(day_keyed=False)
    found = window.days_across_months(d0, d1)
    assert [d.date().isoformat() for d in found] == straddling


@pytest.mark.parametrize(
    ("group", "says"),
    [("month,month", "names a key twice"), ("week", "use user, team, host, gpu, day, month")],
)
async def test_bad_month_groupings_are_422(app, client, group, says) -> None:
    tenant = await quick_tenant(app, "months")
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/usage",
        params={"from": "2026-01-01", "to": "2026-02-01", "groupBy": group},
        headers=tenant.auth(),
    )
    assert r.status_code == 422
    assert says in r.json()["detail"]
