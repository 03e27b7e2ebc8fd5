"""A hand-computed fleet for the energy reports (no tests here).

Workspace in Africa/Lagos (UTC+1 all year), D = three days ago at UTC midnight, d its
date; maxSampleGap two hours. One host, two GPUs, observations (UTC):

    time    GPU-0                                  GPU-1
    D+21    idle-held by alice and bob, 200 W      idle (nobody), 50 W
    D+22    active, alice, power unknown (null)    idle, 50 W
    D+23    active, alice, 300 W                   idle-held by carol, 100 W
    D+24    idle-held, alice, 100 W                idle-held by carol, 100 W
    D+25    (closes the hour before; then a 3 h gap: counts for nobody)
    D+28    active, alice, 400 W                   idle, 60 W
    D+28:30 (closes the half hour)

So GPU-0: 4.5 h covered, 3.5 h of them with power, 0.2 + 0.3 + 0.1 + 0.2 = 0.8 kWh;
GPU-1: 4.5 h covered, all with power, 0.05 + 0.05 + 0.1 + 0.1 + 0.03 = 0.33 kWh.

Rates (the report in EUR): electricity 0.20 from d-10 and 0.50 from d+1, which begins at
Lagos midnight, D+23:00 UTC, in the middle of the UTC day D; carbon intensity 400 g/kWh
from d-10 and 250 from d+1. The closed days' day rows are refreshed, so a report would
read UTC day D from its day row but for the rate that starts inside it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx
import psycopg

from board.db.urls import libpq_url
from board.rollups.daily import refresh_day_rollups
from tests.board.builders import Tenant, enroll, push
from tests.board.test_reports_builders import (
    days_ago_midnight,
    gpu,
    observation,
    proc,
    set_max_gap,
)

ZONE = "Africa/Lagos"


def fixture_day() -> datetime:
    return days_ago_midnight(3)


def _gpu(index: int, state: str, users: tuple[str, ...], watts: int | None) -> dict[str, Any]:
    return gpu(
        index,
        util=80 if state == "active" else 0,
        state=state,
        procs=[proc(u) for u in users],
        power=watts,
    )


def _observations(day: datetime) -> list[dict[str, Any]]:
    steps = [
        (21, _gpu(0, "idle_held", ("alice", "bob"), 200), _gpu(1, "idle", (), 50)),
        (22, _gpu(0, "active", ("alice",), None), _gpu(1, "idle", (), 50)),
        (23, _gpu(0, "active", ("alice",), 300), _gpu(1, "idle_held", ("carol",), 100)),
        (24, _gpu(0, "idle_held", ("alice",), 100), _gpu(1, "idle_held", ("carol",), 100)),
        (25, _gpu(0, "idle", (), 0), _gpu(1, "idle", (), 0)),
        (28, _gpu(0, "active", ("alice",), 400), _gpu(1, "idle", (), 60)),
        (28.5, _gpu(0, "idle", (), 0), _gpu(1, "idle", (), 0)),
    ]
    return [observation(day + timedelta(hours=h), [a, b]) for h, a, b in steps]


def rates(day: datetime) -> tuple[dict[str, Any], dict[str, Any]]:
    """The electricity prices and carbon intensity bodies of the fixture."""
    d = day.date()
    before, after = (d - timedelta(days=10)).isoformat(), (d + timedelta(days=1)).isoformat()
    prices = {"prices": [{"perKWh": "0.20", "from": before}, {"perKWh": 0.5, "from": after}]}
    carbon = {"values": [{"gramsPerKWh": 400, "from": before}, {"gramsPerKWh": 250, "from": after}]}
    return prices, carbon


async def energy_fleet(
    app: Any, client: httpx.AsyncClient, tenant: Tenant, *, priced: bool = True
) -> datetime:
    """The fleet above in tenant's workspace; `priced`: with the rates and a currency
    (EUR, and a GPU-hour price "*" 1.00 from d-10, so user rows are costed too).
    Returns D."""
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings",
        json={"timezone": ZONE},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    await set_max_gap(client, tenant, 7200)
    day = fixture_day()
    host = await enroll(client, tenant, "node-e")
    for body in _observations(day):
        r = await push(client, host["agentToken"], body)
        assert r.status_code == 202, r.text
    if priced:
        d = day.date()
        gpu_prices = {
            "currency": "EUR",
            "prices": [
                {"gpuModel": "*", "perGpuHour": 1, "from": (d - timedelta(days=10)).isoformat()}
            ],
        }
        base = f"/api/v1/workspaces/{tenant.slug}"
        r = await client.put(f"{base}/prices", json=gpu_prices, headers=tenant.auth())
        assert r.status_code == 200, r.text
        prices, carbon = rates(day)
        r = await client.put(f"{base}/energy-prices", json=prices, headers=tenant.auth())
        assert r.status_code == 200, r.text
        r = await client.put(f"{base}/carbon-intensity", json=carbon, headers=tenant.auth())
        assert r.status_code == 200, r.text
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await refresh_day_rollups(conn)
    return day


def window(day: datetime) -> dict[str, str]:
    """Lagos days d and d+1: D-1h to D+47h UTC."""
    d = day.date()
    return {"from": d.isoformat(), "to": (d + timedelta(days=2)).isoformat()}
