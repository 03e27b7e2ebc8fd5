"""Builders for the budgets tests: teams, seeded rollup hours, budgets (no tests here).

Hours are written straight into the hourly rollups (as tests/board/test_reports_zones.py
does): the periods tested lie months before the raw history the agents may push into.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import psycopg

from board.db.urls import libpq_url
from board.rollups.daily import refresh_day_rollups
from tests.board.builders import Tenant, enroll, push
from tests.board.money_builders import base
from tests.board.test_reports_builders import days_ago_midnight, gpu, observation, workspace_id

HOUR_US = 3_600_000_000


async def set_zone(client: httpx.AsyncClient, tenant: Tenant, zone: str) -> None:
    r = await client.patch(
        f"{base(tenant)}/settings", json={"timezone": zone}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text


async def set_team(client: httpx.AsyncClient, tenant: Tenant, user: str, team: str | None) -> None:
    r = await client.put(
        f"{base(tenant)}/directory/{user}",
        json={"memberEmail": None, "team": team},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text


async def set_prices(client: httpx.AsyncClient, tenant: Tenant, per_hour: str = "1.50") -> None:
    body = {
        "currency": "EUR",
        "prices": [{"gpuModel": "*", "perGpuHour": per_hour, "from": "2026-01-01"}],
    }
    r = await client.put(f"{base(tenant)}/prices", json=body, headers=tenant.auth())
    assert r.status_code == 200, r.text


async def put_budget(
    client: httpx.AsyncClient, tenant: Tenant, team: str, **body: Any
) -> dict[str, Any]:
    r = await client.put(f"{base(tenant)}/budgets/{team}", json=body, headers=tenant.auth())
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found


async def budgets_report(
    client: httpx.AsyncClient, tenant: Tenant, period: str, role: str = "finance"
) -> dict[str, Any]:
    r = await client.get(
        f"{base(tenant)}/reports/budgets", params={"period": period}, headers=tenant.auth(role)
    )
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found


def by_team(report: Mapping[str, Any]) -> dict[str | None, dict[str, Any]]:
    return {row["team"]: row for row in report["rows"]}


async def seed_hours(
    app: Any, client: httpx.AsyncClient, tenant: Tenant, held: Mapping[tuple[str, datetime], int]
) -> None:
    """One GPU held by Linux users in the given UTC hours ((user, hour) -> held µs, all
    of it active), with day rows refreshed so reports read whole days from them."""
    host = await enroll(client, tenant, f"node-{tenant.slug}")
    r = await push(client, host["agentToken"], observation(days_ago_midnight(1), [gpu(0)]))
    assert r.status_code == 202, r.text
    url = libpq_url(app.state.runtime.database_url)
    per_hour: dict[datetime, int] = defaultdict(int)
    for (_, hour), us in held.items():
        per_hour[hour] += us
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        cur = await conn.execute("SELECT id, host_id FROM gpus WHERE workspace_id = %s", [ws])
        gpu_id, host_id = (await cur.fetchone()) or (0, 0)
        hours = sorted(per_hour)
        await conn.execute(
            """
            INSERT INTO gpu_hour_rollups (workspace_id, gpu_id, hour_start, host_id, covered_us,
                active_us, idle_held_us, idle_us, util_pct_us, memory_used_mb_us,
                memory_total_mb_us, sample_count)
            SELECT %s, %s, h, %s, 3600000000, x, 0, 3600000000 - x, 50 * 3600000000::bigint,
                   0, 3600000000, 120
            FROM unnest(%s::timestamptz[], %s::bigint[]) AS s(h, x)
            """,
            [ws, gpu_id, host_id, hours, [per_hour[h] for h in hours]],
        )
        for (user, hour), us in sorted(held.items()):
            await conn.execute(
                """
                INSERT INTO user_hour_rollups (workspace_id, gpu_id, linux_user, hour_start,
                    host_id, held_us, active_us, idle_held_us)
                VALUES (%s, %s, %s, %s, %s, %s, %s, 0)
                """,
                [ws, gpu_id, user, hour, host_id, us, us],
            )
        await refresh_day_rollups(conn)


def held_in(
    held: Mapping[tuple[str, datetime], int], users: set[str], zone: str, first: date, end: date
) -> int:
    """The µs of `users` in the local dates [first, end) of `zone`, computed here the
    obvious way: an hour counts on the local date its start falls on."""
    tz = ZoneInfo(zone)
    return sum(
        us
        for (user, hour), us in held.items()
        if user in users and first <= hour.astimezone(tz).date() < end
    )


def hourly(
    start: datetime, hours: int, users: Mapping[str, int]
) -> dict[tuple[str, datetime], int]:
    """Each user's µs every hour from `start`, differing from hour to hour (a period cut
    one hour off has other sums)."""
    found: dict[tuple[str, datetime], int] = {}
    for i in range(hours):
        hour = start + timedelta(hours=i)
        for user, base_us in users.items():
            found[(user, hour)] = base_us + (i * 7 % 13) * HOUR_US // 100
    return found
