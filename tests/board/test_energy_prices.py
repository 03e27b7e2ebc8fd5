"""Electricity prices and carbon intensity through the API: dated in the workspace's zone
(a DST day included), the GPU-hour prices' correction window, audited, the currency they
are in; every bad body a 422 with a sentence, the wrong role a 403.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from board.db.urls import libpq_url
from board.rollups.daily import refresh_day_rollups
from tests.board.answers import refused
from tests.board.builders import Tenant, enroll, push
from tests.board.db import execute
from tests.board.test_reports_builders import (
    days_ago_midnight,
    gpu,
    observation,
    quick_tenant,
    report,
    workspace_id,
)

BERLIN = "Europe/Berlin"
HOUR_US = 3_600_000_000
# Berlin's local days 2026-10-24 (24 h), 2026-10-25 (25 h: clocks go back) and
# 2026-10-26 (24 h), as UTC hours.
FIRST = datetime(2026, 10, 23, 22, tzinfo=UTC)
HOURS = 24 + 25 + 24


def _url(tenant: Tenant, what: str) -> str:
    return f"/api/v1/workspaces/{tenant.slug}/{what}"


async def _seed_berlin(app: Any, client: httpx.AsyncClient, tenant: Tenant) -> None:
    """One GPU at 100 W, held by dana, every hour of the three days (rollups written
    directly: those days are older than the raw history); day rows refreshed."""
    r = await client.patch(
        _url(tenant, "settings"), json={"timezone": BERLIN}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    host = await enroll(client, tenant)
    r = await push(client, host["agentToken"], observation(days_ago_midnight(1), [gpu(0)]))
    assert r.status_code == 202, r.text
    hours = [FIRST + timedelta(hours=i) for i in range(HOURS)]
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        cur = await conn.execute("SELECT id, host_id FROM gpus WHERE workspace_id = %s", [ws])
        gpu_id, host_id = (await cur.fetchone()) or (0, 0)
        await conn.execute(
            """
            INSERT INTO gpu_hour_rollups (workspace_id, gpu_id, hour_start, host_id, covered_us,
                active_us, idle_held_us, idle_us, util_pct_us, memory_used_mb_us,
                memory_total_mb_us, sample_count, energy_covered_us, active_energy_uws)
            SELECT %s, %s, h, %s, 3600000000, 3600000000, 0, 0, 0, 0, 0, 120,
                   3600000000, 100 * 3600000000::bigint
            FROM unnest(%s::timestamptz[]) AS h
            """,
            [ws, gpu_id, host_id, hours],
        )
        await conn.execute(
            """
            INSERT INTO user_hour_rollups (workspace_id, gpu_id, linux_user, hour_start,
                host_id, held_us, active_us, idle_held_us, energy_held_us, active_energy_uws)
            SELECT %s, %s, 'dana', h, %s, 3600000000, 3600000000, 0, 3600000000,
                   100 * 3600000000::bigint
            FROM unnest(%s::timestamptz[]) AS h
            """,
            [ws, gpu_id, host_id, hours],
        )
        await refresh_day_rollups(conn)


async def test_a_dst_day_is_priced_by_its_own_midnights(
    app: Any, client: httpx.AsyncClient
) -> None:
    """A price from 2026-10-26 starts at Berlin's midnight after the 25-hour day
    (23:00 UTC, not 22:00): the DST day's 25 hours keep its own price."""
    tenant = await quick_tenant(app, "dst")
    await _seed_berlin(app, client, tenant)
    r = await client.put(
        _url(tenant, "prices"), json={"currency": "EUR", "prices": []}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    prices = {
        "prices": [
            {"perKWh": "0.20", "from": "2026-10-24"},
            {"perKWh": "0.40", "from": "2026-10-25"},
            {"perKWh": "0.10", "from": "2026-10-26"},
        ]
    }
    r = await client.put(_url(tenant, "energy-prices"), json=prices, headers=tenant.auth())
    assert r.status_code == 200, r.text
    starts = [datetime.fromisoformat(p["startsAt"]) for p in r.json()["prices"]]
    # Berlin's midnights: +02:00 before the clocks go back, +01:00 after.
    assert starts == [
        datetime(2026, 10, 23, 22, tzinfo=UTC),
        datetime(2026, 10, 24, 22, tzinfo=UTC),
        datetime(2026, 10, 25, 23, tzinfo=UTC),
    ]
    assert [p["until"] for p in r.json()["prices"]] == ["2026-10-25", "2026-10-26", None]
    carbon = {"values": [{"gramsPerKWh": 300, "from": "2026-10-25"}]}
    r = await client.put(_url(tenant, "carbon-intensity"), json=carbon, headers=tenant.auth())
    assert r.status_code == 200, r.text

    window = {"from": "2026-10-24", "to": "2026-10-27", "tz": BERLIN}
    for group in ("day", "user,day"):
        body = await report(client, tenant, "usage", groupBy=group, **window)
        got = {
            r["day"]: (r["energyKWh"], r["energyCoveredHours"], r["energyCost"], r["co2eKg"])
            for r in body["rows"]
        }
        assert got == {
            # 24 h at 100 W = 2.4 kWh × 0.20; no intensity yet: null.
            "2026-10-24": (2.4, 24.0, 0.48, None),
            # 25 h: 2.5 kWh × 0.40, × 300 g.
            "2026-10-25": (2.5, 25.0, 1.0, 0.75),
            "2026-10-26": (2.4, 24.0, 0.24, 0.72),
        }, group
        # Some energy had no intensity in force: the window's CO2e is unknown.
        assert (body["totals"]["energyCost"], body["totals"]["co2eKg"]) == (1.72, None)
    util = await report(client, tenant, "utilization", groupBy="gpu", bucket="day", **window)
    assert [(r["energyKWh"], r["avgPowerW"], r["energyCoveredHours"]) for r in util["rows"]] == [
        (2.4, 100.0, 24.0),
        (2.5, 100.0, 25.0),
        (2.4, 100.0, 24.0),
    ]


async def test_the_lists_follow_the_price_rules_and_are_audited(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "rates")
    today = datetime.now(UTC).date()
    old, recent, future = (
        (today - timedelta(days=30)).isoformat(),
        (today - timedelta(days=2)).isoformat(),
        (today + timedelta(days=5)).isoformat(),
    )
    body = {"prices": [{"perKWh": "0.25", "from": old}]}
    # No currency yet: an electricity price would be in none.
    detail = refused(
        await client.put(_url(tenant, "energy-prices"), json=body, headers=tenant.auth()), 409
    )
    assert "currency" in detail
    r = await client.put(
        _url(tenant, "prices"), json={"currency": "CHF", "prices": []}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    r = await client.put(_url(tenant, "energy-prices"), json=body, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert r.json()["currency"] == "CHF"
    assert r.json()["prices"][0]["perKWh"] == 0.25
    assert not r.json()["prices"][0]["fixed"]  # entered now: the window runs from now

    # Entered 40 days ago: fixed. A correction, a removal, a back-dated addition: 409.
    ws = await _workspace(app, tenant)
    await execute(
        app,
        "UPDATE energy_prices SET created_at = now() - interval '40 days' WHERE workspace_id = %s",
        ws,
    )
    fixed = {"prices": [{"perKWh": "0.30", "from": old}]}
    detail = refused(
        await client.put(_url(tenant, "energy-prices"), json=fixed, headers=tenant.auth()), 409
    )
    assert "electricity price" in detail
    assert "is fixed" in detail
    refused(await client.delete(_url(tenant, f"energy-prices/{old}"), headers=tenant.auth()), 409)
    back = {"prices": [{"perKWh": "0.30", "from": (today - timedelta(days=20)).isoformat()}]}
    detail = refused(
        await client.put(_url(tenant, "energy-prices"), json=back, headers=tenant.auth()), 409
    )
    assert "more than 7 days ago" in detail
    # The currency cannot change under a price in force.
    refused(
        await client.put(
            _url(tenant, "prices"), json={"currency": "EUR", "prices": []}, headers=tenant.auth()
        ),
        409,
    )

    # Left out, a begun price stays; a recent one is added (back-dated: audited), a
    # future one too; then the recent one corrected, and removed.
    listed = {"prices": [{"perKWh": "0.27", "from": recent}, {"perKWh": 0.29, "from": future}]}
    r = await client.put(_url(tenant, "energy-prices"), json=listed, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert [(p["from"], p["perKWh"]) for p in r.json()["prices"]] == [
        (old, 0.25),
        (recent, 0.27),
        (future, 0.29),
    ]
    listed["prices"][0]["perKWh"] = "0.28"
    r = await client.put(_url(tenant, "energy-prices"), json=listed, headers=tenant.auth())
    assert r.status_code == 200, r.text
    r = await client.delete(_url(tenant, f"energy-prices/{recent}"), headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert [p["from"] for p in r.json()["prices"]] == [old, future]
    refused(
        await client.delete(_url(tenant, f"energy-prices/{recent}"), headers=tenant.auth()), 404
    )

    log = await client.get(_url(tenant, "audit-log"), headers=tenant.auth())
    assert log.status_code == 200, log.text
    actions = [(e["action"], e["detail"]) for e in log.json()["events"] if "energy" in e["action"]]
    assert (
        "energy_price.added",
        {"from": recent, "perKWh": "0.27", "previousPerKWh": None, "currency": "CHF"},
    ) in actions
    assert (
        "energy_price.changed",
        {"from": recent, "perKWh": "0.28", "previousPerKWh": "0.27", "currency": "CHF"},
    ) in actions
    assert (
        "energy_price.removed",
        {"from": recent, "perKWh": None, "previousPerKWh": "0.28", "currency": "CHF"},
    ) in actions

    # Carbon intensity: no currency needed; readers see both lists, members may not set.
    carbon = {"values": [{"gramsPerKWh": "128.5", "from": recent}]}
    r = await client.put(_url(tenant, "carbon-intensity"), json=carbon, headers=tenant.auth())
    assert r.status_code == 200, r.text
    for role in ("member", "finance"):
        for what in ("energy-prices", "carbon-intensity"):
            assert (
                await client.get(_url(tenant, what), headers=tenant.auth(role))
            ).status_code == 200
        refused(
            await client.put(
                _url(tenant, "carbon-intensity"), json=carbon, headers=tenant.auth(role)
            ),
            403,
        )
        refused(
            await client.delete(
                _url(tenant, f"carbon-intensity/{recent}"), headers=tenant.auth(role)
            ),
            403,
        )
    got = (await client.get(_url(tenant, "carbon-intensity"), headers=tenant.auth("member"))).json()
    assert [(v["from"], v["gramsPerKWh"], v["until"]) for v in got["values"]] == [
        (recent, 128.5, None)
    ]
    assert (got["timezone"], got["correctionDays"]) == ("UTC", 7)

    # Another workspace sees none of it, and cannot touch it.
    other = await quick_tenant(app, "rates")
    got = (await client.get(_url(other, "energy-prices"), headers=other.auth())).json()
    assert (got["prices"], got["currency"]) == ([], None)
    refused(
        await client.delete(
            f"/api/v1/workspaces/{tenant.slug}/carbon-intensity/{recent}", headers=other.auth()
        ),
        401,
        403,
        404,
    )


async def _workspace(app: Any, tenant: Tenant) -> int:
    from tests.board.db import scalar

    return int(await scalar(app, "SELECT id FROM workspaces WHERE slug = %s", tenant.slug))


BAD_PRICES = [
    {"prices": [{"perKWh": -0.1, "from": "2026-11-01"}]},
    {"prices": [{"perKWh": "1e9", "from": "2026-11-01"}]},
    {"prices": [{"perKWh": "NaN", "from": "2026-11-01"}]},
    {"prices": [{"perKWh": "Infinity", "from": "2026-11-01"}]},
    {"prices": [{"perKWh": "0.1234567", "from": "2026-11-01"}]},
    {"prices": [{"perKWh": "١", "from": "2026-11-01"}]},
    {"prices": [{"perKWh": True, "from": "2026-11-01"}]},
    {"prices": [{"perKWh": "0.1", "from": "2026-02-30"}]},
    {"prices": [{"perKWh": "0.1", "from": "1999-12-31"}]},
    {"prices": [{"perKWh": "0.1", "from": "tomorrow"}]},
    {"prices": [{"perKWh": "0.1"}]},
    {"prices": [{"perKWh": "0.1", "from": "2026-11-01", "currency": "EUR"}]},
    {"prices": [{"perKWh": "0.1", "from": "2026-11-01"}, {"perKWh": 1, "from": "2026-11-01"}]},
    {"prices": [{"perKWh": 1, "from": "2026-11-01"}] * 501},
    {"prices": "0.1"},
    {},
    [],
]
BAD_CARBON = [
    {"values": [{"gramsPerKWh": -1, "from": "2026-11-01"}]},
    {"values": [{"gramsPerKWh": 10_001, "from": "2026-11-01"}]},
    {"values": [{"gramsPerKWh": "nan", "from": "2026-11-01"}]},
    {"values": [{"gramsPerKWh": "1.2345", "from": "2026-11-01"}]},
    {"values": [{"gramsPerKWh": 100, "from": "2026-11-01T00:00:00Z"}]},
    {"values": [{"gramsPerKWh": 100, "from": "2026-11-01"}] * 501},
    {
        "values": [
            {"gramsPerKWh": 100, "from": "2026-11-01"},
            {"gramsPerKWh": 9, "from": "2026-11-01"},
        ]
    },
    {"values": None},
]


@pytest.mark.parametrize("body", BAD_PRICES, ids=range(len(BAD_PRICES)))
async def test_bad_energy_prices_are_refused(
    app: Any, client: httpx.AsyncClient, body: Any
) -> None:
    tenant = await quick_tenant(app, "bad")
    r = await client.put(
        _url(tenant, "prices"), json={"currency": "EUR", "prices": []}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    refused(await client.put(_url(tenant, "energy-prices"), json=body, headers=tenant.auth()), 422)
    got = (await client.get(_url(tenant, "energy-prices"), headers=tenant.auth())).json()
    assert got["prices"] == []


@pytest.mark.parametrize("body", BAD_CARBON, ids=range(len(BAD_CARBON)))
async def test_bad_carbon_intensity_is_refused(
    app: Any, client: httpx.AsyncClient, body: Any
) -> None:
    tenant = await quick_tenant(app, "bad")
    refused(
        await client.put(_url(tenant, "carbon-intensity"), json=body, headers=tenant.auth()), 422
    )
    for day in ("2026-13-01", "x", "1999-01-01"):
        refused(
            await client.delete(_url(tenant, f"carbon-intensity/{day}"), headers=tenant.auth()), 422
        )


async def test_a_nan_literal_is_refused(app: Any, client: httpx.AsyncClient) -> None:
    """JSON has no NaN, but Python's reader takes the bare word: still a 422."""
    tenant = await quick_tenant(app, "bad")
    r = await client.put(
        _url(tenant, "carbon-intensity"),
        content=b'{"values": [{"gramsPerKWh": NaN, "from": "2026-11-01"}]}',
        headers={**tenant.auth(), "Content-Type": "application/json"},
    )
    refused(r, 422)
