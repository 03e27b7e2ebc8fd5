"""Builders for the money tests: a hand-computed fleet of two GPU models (no tests here).

The fixture, all in UTC, with the workspace in Africa/Lagos (UTC+1 all year, no DST) and
D = three days ago at UTC midnight, d its date:

- one host, GPU-0 an "NVIDIA A100", GPU-1 an "NVIDIA H100";
- observations at D+22:00, D+24:00 and D+25:00 (maxSampleGap one day, so both intervals
  count): alice holds GPU-0 busy (active), bob holds GPU-1 without using it (idle-held):
  3 GPU-hours each, D+22:00 to D+25:00;
- prices in EUR: "*" 1.00 from d-10; "NVIDIA A100" 2.00 from d-10 and 3.00 from d+1,
  which begins at Lagos midnight = D+23:00 UTC, in the middle of the UTC day D.

So alice costs 2.00 (22:00-23:00) + 3.00 + 3.00 = 8.00 and bob (H100: "*") 3 × 1.00.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

import httpx
import psycopg

from board.db.urls import libpq_url
from tests.board.builders import Tenant, enroll, push
from tests.board.test_reports_builders import (
    days_ago_midnight,
    gpu,
    observation,
    proc,
)

A100 = "NVIDIA A100"
H100 = "NVIDIA H100"


def fixture_day() -> datetime:
    return days_ago_midnight(3)


def prices_body(d: date) -> dict[str, Any]:
    return {
        "currency": "EUR",
        "prices": [
            {"gpuModel": "*", "perGpuHour": 1, "from": (d - timedelta(days=10)).isoformat()},
            {"gpuModel": A100, "perGpuHour": "2.00", "from": (d - timedelta(days=10)).isoformat()},
            {"gpuModel": A100, "perGpuHour": 3, "from": (d + timedelta(days=1)).isoformat()},
        ],
    }


def two_models(at: datetime) -> dict[str, Any]:
    a100 = gpu(0, util=60, procs=[proc("alice")])
    h100 = gpu(1, util=0, procs=[proc("bob")])
    h100["name"] = H100
    return observation(at, [a100, h100])


async def build_fleet(
    client: httpx.AsyncClient, tenant: Tenant, prices: dict[str, Any] | None = None
) -> datetime:
    """The fleet above in tenant's workspace (priced by `prices`, a PUT body, when given);
    returns D."""
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings",
        json={
            "maxSampleGapSeconds": 86400,
            "maxSampleGapFrom": "2000-01-01T00:00:00Z",  # before the fleet's history
            "timezone": "Africa/Lagos",
        },
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    day = fixture_day()
    host = await enroll(client, tenant, "node-a")
    for hours in (22, 24, 25):
        body = two_models(day + timedelta(hours=hours))
        assert (await push(client, host["agentToken"], body)).status_code == 202
    r = await client.put(
        f"/api/v1/workspaces/{tenant.slug}/prices",
        json=prices if prices is not None else prices_body(day.date()),
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    return day


async def set_team(client: httpx.AsyncClient, tenant: Tenant, user: str, team: str | None) -> None:
    r = await client.put(
        f"/api/v1/workspaces/{tenant.slug}/directory/{user}",
        json={"memberEmail": None, "team": team},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text


async def age_prices(database_url: str, slug: str, days: int) -> None:
    """Every price of the workspace as if entered `days` earlier: the correction window's
    clock, for prices that start at least that far back (the tests cannot wait a week)."""
    async with await psycopg.AsyncConnection.connect(
        libpq_url(database_url), autocommit=True
    ) as conn:
        await conn.execute(
            "UPDATE prices SET created_at = created_at - make_interval(days => %s) "
            "WHERE workspace_id = (SELECT id FROM workspaces WHERE slug = %s)",
            [days, slug],
        )


def base(tenant: Tenant) -> str:
    return f"/api/v1/workspaces/{tenant.slug}"


async def held_hours(
    client: httpx.AsyncClient, tenant: Tenant, start: datetime, users: dict[str, str]
) -> None:
    """Two credited hours from `start`: each GPU model in `users` (model → Linux user)
    held busy by its user on a GPU of its own."""
    host = await enroll(client, tenant, f"node-{tenant.slug}")
    r = await client.patch(
        f"{base(tenant)}/settings",
        json={"maxSampleGapSeconds": 86400, "maxSampleGapFrom": "2000-01-01T00:00:00Z"},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    for step in range(3):
        gpus = []
        for index, (model, user) in enumerate(users.items()):
            one = gpu(index, util=70, state="active", procs=[proc(user)])
            one["name"] = model
            one["uuid"] = f"GPU-{index}-{tenant.slug}"
            gpus.append(one)
        body = observation(start + timedelta(hours=step), gpus)
        r = await push(client, host["agentToken"], body)
        assert r.status_code == 202, r.text
