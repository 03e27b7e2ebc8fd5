"""Money: prices per GPU model (the past never rewritten), cost in the usage report, teams.

Figures are hand-computed in tests/board/money_builders.py.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from board.db.urls import libpq_url
from board.pricing.cost import (
    Currency,
    Pricing,
    amount,
    amount_text,
    minor_amount,
    window_pricing,
)
from board.reportkit import params
from board.reportkit.csv import render_csv
from board.reports import groupings, service
from board.reports import repository as repo
from board.rollups.daily import refresh_day_rollups
from board.runtime import Runtime
from tests.board.builders import enroll, push
from tests.board.money_builders import (
    A100,
    H100,
    age_prices,
    build_fleet,
    fixture_day,
    prices_body,
    set_team,
    two_models,
)
from tests.board.test_reports_builders import quick_tenant, report, workspace_id


def _prices(slug: str) -> str:
    return f"/api/v1/workspaces/{slug}/prices"


def _by(rows: list[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(r[k] for k in keys): r for r in rows}


async def test_cost_per_user_and_team_hand_computed(app, client, database_url) -> None:
    tenant = await quick_tenant(app, "money")
    day = await build_fleet(client, tenant)
    window = {"from": day.date().isoformat(), "to": (day + timedelta(days=2)).date().isoformat()}

    by_user = await report(client, tenant, "usage", groupBy="user", tz="UTC", **window)
    rows = _by(by_user["rows"], "user")
    assert rows[("alice",)]["heldGpuHours"] == 3.0
    assert rows[("alice",)]["cost"] == 8.0
    assert rows[("bob",)]["idleHeldGpuHours"] == 3.0
    assert rows[("bob",)]["cost"] == 3.0
    assert {r["currency"] for r in by_user["rows"]} == {"EUR"}
    assert by_user["totals"]["cost"] == 11.0
    assert by_user["totals"]["currency"] == "EUR"

    # Nobody has a team yet: one row that says so (team null).
    by_team = await report(client, tenant, "usage", groupBy="team", tz="UTC", **window)
    assert [(r["team"], r["cost"]) for r in by_team["rows"]] == [(None, 11.0)]

    await set_team(client, tenant, "alice", "vision")
    await set_team(client, tenant, "bob", "nlp")
    by_team = await report(client, tenant, "usage", groupBy="team", tz="UTC", **window)
    assert [(r["team"], r["heldGpuHours"], r["cost"]) for r in by_team["rows"]] == [
        ("nlp", 3.0, 3.0),
        ("vision", 3.0, 8.0),
    ]
    assert "coveredGpuHours" not in by_team["rows"][0]

    # The price changes at Lagos midnight, 23:00 UTC: the UTC day D has 1 h at 2.00 and
    # 1 h at 3.00, the next day 1 h at 3.00.
    team_day = await report(client, tenant, "usage", groupBy="team,day", tz="UTC", **window)
    got = {(r["team"], r["day"]): r["cost"] for r in team_day["rows"]}
    d0, d1 = day.date().isoformat(), (day + timedelta(days=1)).date().isoformat()
    assert got == {("nlp", d0): 2.0, ("nlp", d1): 1.0, ("vision", d0): 5.0, ("vision", d1): 3.0}

    # Once the days' day rows are computed (the maintenance schedule), the day the price
    # changes inside is still read from its hours: the same costs.
    async with await psycopg.AsyncConnection.connect(
        libpq_url(database_url), autocommit=True
    ) as conn:
        await refresh_day_rollups(conn)
    again = await report(client, tenant, "usage", groupBy="team,day", tz="UTC", **window)
    assert {(r["team"], r["day"]): r["cost"] for r in again["rows"]} == got
    whole = await report(client, tenant, "usage", groupBy="team", tz="UTC", **window)
    assert [(r["team"], r["cost"]) for r in whole["rows"]] == [("nlp", 3.0), ("vision", 8.0)]

    # A user moving teams: the directory's team as it is now holds for the whole window
    # (docs/money.md), so bob's past hours move with him.
    await set_team(client, tenant, "bob", "vision")
    moved = await report(client, tenant, "usage", groupBy="team,user", tz="UTC", **window)
    assert [(r["team"], r["user"], r["cost"]) for r in moved["rows"]] == [
        ("vision", "alice", 8.0),
        ("vision", "bob", 3.0),
    ]
    # GPU models: per GPU, the GPU's own name decides the price.
    by_gpu = await report(client, tenant, "usage", groupBy="gpu", tz="UTC", **window)
    assert {r["gpuName"]: r["cost"] for r in by_gpu["rows"]} == {A100: 8.0, H100: 3.0}


async def test_csv_carries_team_and_cost(app, client) -> None:
    tenant = await quick_tenant(app, "money")
    day = await build_fleet(client, tenant)
    await set_team(client, tenant, "alice", '=HYPERLINK("http://evil.example")')
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/usage",
        params={
            "from": day.date().isoformat(),
            "to": (day + timedelta(days=2)).date().isoformat(),
            "groupBy": "team,user",
            "tz": "UTC",
            "format": "csv",
        },
        headers=tenant.auth("finance"),
    )
    assert r.status_code == 200, r.text
    lines = list(csv.reader(io.StringIO(r.text)))
    assert lines[0] == [
        "team",
        "user",
        "heldGpuHours",
        "activeGpuHours",
        "idleHeldGpuHours",
        "idleHeldShare",
        "cost",
        "currency",
        "energyKWh",
        "activeEnergyKWh",
        "idleHeldEnergyKWh",
        "energyCoveredHours",
        "energyCost",
        "co2eKg",
        "outsideJobGpuHours",
    ]
    # The team a spreadsheet would run as a formula is shown as text.
    assert lines[1][0] == '\'=HYPERLINK("http://evil.example")'
    assert lines[1][1:] == [
        "alice",
        "3.000000",
        "3.000000",
        "0.000000",
        "0.000000",
        "8.00",  # money in the currency's minor units
        "EUR",
        # 3 h at 100 W; no electricity price or carbon intensity: empty, not 0.
        "0.300000",
        "0.300000",
        "0.000000",
        "3.000000",
        "",
        "",
        "0.000000",  # nothing credited outside a scheduler job
    ]
    assert lines[2] == [
        "",
        "bob",
        "3.000000",
        "0.000000",
        "3.000000",
        "1.000000",
        "3.00",
        "EUR",
        "0.300000",
        "0.000000",
        "0.300000",
        "3.000000",
        "",
        "",
        "0.000000",
    ]


async def test_no_prices_means_no_cost(app, client) -> None:
    tenant = await quick_tenant(app, "money")
    today = datetime.now(UTC).date()
    body = await report(
        client,
        tenant,
        "usage",
        groupBy="team",
        **{"from": today.isoformat(), "to": (today + timedelta(days=1)).isoformat()},
    )
    assert body["rows"] == []
    assert body["totals"]["cost"] is None
    assert body["totals"]["currency"] is None


def test_rounding_is_half_even_per_row_and_once_for_totals() -> None:
    eur = Currency("EUR", 2)
    unit = 3_600_000_000 * 10**6  # one currency unit as an exact numerator
    assert minor_amount(unit * 125 // 1000, 2) == 12  # 0.125 → 0.12
    assert minor_amount(unit * 135 // 1000, 2) == 14  # 0.135 → 0.14
    assert minor_amount(unit * 1251 // 10000, 2) == 13  # 0.1251 → 0.13
    assert amount(unit * 5 // 10, Currency("JPY", 0)) == 0.0  # 0.5 → 0
    assert amount_text(unit * 15 // 10, Currency("JPY", 0)) == "2"  # 1.5 → 2
    assert amount_text(unit * 12345 // 10000, Currency("KWD", 3)) == "1.234"
    assert amount_text(unit * 3, eur) == "3.00"
    # Three rows of 0.125 each: rows say 0.12, the total is 0.375 → 0.38, within one
    # minor unit per row of their sum.
    rows = [unit * 125 // 1000] * 3
    assert sum(minor_amount(n, 2) for n in rows) == 36
    assert minor_amount(sum(rows), 2) == 38


async def test_price_history_is_never_rewritten(app, client, database_url) -> None:
    tenant = await quick_tenant(app, "money")
    today = datetime.now(UTC).date()  # the workspace is in UTC
    past = (today - timedelta(days=30)).isoformat()
    tomorrow = (today + timedelta(days=1)).isoformat()
    later = (today + timedelta(days=9)).isoformat()
    first = {
        "currency": "EUR",
        "prices": [
            {"gpuModel": "*", "perGpuHour": 1.5, "from": past},
            {"gpuModel": A100, "perGpuHour": 2, "from": later},
        ],
    }
    # Until a price is fixed, anything goes: back-dated for last quarter's reports.
    r = await client.put(_prices(tenant.slug), json=first, headers=tenant.auth())
    assert r.status_code == 200, r.text
    shown = r.json()
    assert shown["currency"] == "EUR"
    assert shown["minorUnits"] == 2
    assert shown["correctionDays"] == 7
    # Entered just now, the back-dated price stays correctable for the window.
    assert [
        (p["gpuModel"], p["perGpuHour"], p["from"], p["until"], p["fixed"]) for p in shown["prices"]
    ] == [
        ("*", 1.5, past, None, False),
        (A100, 2.0, later, None, False),
    ]
    # A week and a day later, its window has closed.
    await age_prices(database_url, tenant.slug, 8)
    shown = (await client.get(_prices(tenant.slug), headers=tenant.auth())).json()
    assert [(p["gpuModel"], p["fixed"]) for p in shown["prices"]] == [("*", True), (A100, False)]
    eight_days_ago = (today - timedelta(days=8)).isoformat()
    refused: list[tuple[dict[str, Any], str]] = [
        # Changing a fixed price.
        (
            {"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1.4, "from": past}]},
            "is fixed",
        ),
        # Adding one that starts further back than the correction window.
        (
            {
                "currency": "EUR",
                "prices": [{"gpuModel": H100, "perGpuHour": 9, "from": eight_days_ago}],
            },
            "more than 7 days ago",
        ),
        # Another currency while prices are in force.
        ({"currency": "USD", "prices": []}, "cannot change"),
    ]
    for body, words in refused:
        r = await client.put(_prices(tenant.slug), json=body, headers=tenant.auth())
        assert r.status_code == 409, r.text
        assert words in r.json()["detail"]
    assert (await client.get(_prices(tenant.slug), headers=tenant.auth())).json() == shown

    # The future is replaced; the past is kept whether it is sent again or not.
    r = await client.put(
        _prices(tenant.slug),
        json={
            "currency": "EUR",
            "prices": [{"gpuModel": A100, "perGpuHour": 2.5, "from": tomorrow}],
        },
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    assert [(p["gpuModel"], p["perGpuHour"], p["from"]) for p in r.json()["prices"]] == [
        ("*", 1.5, past),
        (A100, 2.5, tomorrow),
    ]
    r = await client.put(
        _prices(tenant.slug),
        json={
            "currency": "EUR",
            "prices": [
                {"gpuModel": "*", "perGpuHour": "1.500000", "from": past},
                {"gpuModel": "*", "perGpuHour": 1.75, "from": later},
            ],
        },
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    assert [(p["gpuModel"], p["from"], p["until"]) for p in r.json()["prices"]] == [
        ("*", past, later),
        ("*", later, None),
    ]
    # Every change is in the audit log.
    audit = await client.get(f"/api/v1/workspaces/{tenant.slug}/audit-log", headers=tenant.auth())
    if audit.status_code == 200:
        assert sum(1 for e in audit.json()["events"] if e["action"] == "prices.put") == 3


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"currency": "eur", "prices": []}, 422),
        ({"currency": "XYZ", "prices": []}, 422),
        ({"currency": "EUR" * 10, "prices": []}, 422),
        (
            {
                "currency": "EUR",
                "prices": [{"gpuModel": "*", "perGpuHour": -1, "from": "2026-01-01"}],
            },
            422,
        ),
        (
            {
                "currency": "EUR",
                "prices": [{"gpuModel": "*", "perGpuHour": "0.0000001", "from": "2026-01-01"}],
            },
            422,
        ),
        (
            {
                "currency": "EUR",
                "prices": [{"gpuModel": "*", "perGpuHour": "NaN", "from": "2026-01-01"}],
            },
            422,
        ),
        (
            {
                "currency": "EUR",
                "prices": [{"gpuModel": "*", "perGpuHour": 1e9, "from": "2026-01-01"}],
            },
            422,
        ),
        (
            {
                "currency": "EUR",
                "prices": [{"gpuModel": "", "perGpuHour": 1, "from": "2026-01-01"}],
            },
            422,
        ),
        (
            {
                "currency": "EUR",
                "prices": [{"gpuModel": "x" * 101, "perGpuHour": 1, "from": "2026-01-01"}],
            },
            422,
        ),
        (
            {
                "currency": "EUR",
                "prices": [{"gpuModel": "a\u0000b", "perGpuHour": 1, "from": "2026-01-01"}],
            },
            422,
        ),
        (
            {
                "currency": "EUR",
                "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": "2026-13-01"}],
            },
            422,
        ),
        (
            {
                "currency": "EUR",
                "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": "1999-12-31"}],
            },
            422,
        ),
        (
            {
                "currency": "EUR",
                "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": "2026-01-01", "x": 1}],
            },
            422,
        ),
        (
            {
                "currency": "EUR",
                "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": "2026-01-01"}] * 2,
            },
            422,
        ),
        (
            {
                "currency": "EUR",
                "prices": [
                    {"gpuModel": f"m{i}", "perGpuHour": 1, "from": "2026-01-01"} for i in range(501)
                ],
            },
            422,
        ),
        ({"currency": "EUR"}, 422),
        ([], 422),
    ],
)
async def test_bad_prices_are_refused(app, client, body: Any, status: int) -> None:
    tenant = await quick_tenant(app, "money")
    r = await client.put(_prices(tenant.slug), json=body, headers=tenant.auth())
    assert r.status_code == status, r.text
    assert isinstance(r.json()["detail"], str)
    shown = (await client.get(_prices(tenant.slug), headers=tenant.auth())).json()
    assert shown["currency"] is None
    assert shown["prices"] == []


async def test_roles_and_tenants(app, client) -> None:
    tenant = await quick_tenant(app, "money")
    other = await quick_tenant(app, "money")
    body = prices_body(datetime.now(UTC).date())
    for role in ("member", "finance"):
        r = await client.put(_prices(tenant.slug), json=body, headers=tenant.auth(role))
        assert r.status_code == 403, r.text
    for role in ("admin", "member", "finance"):
        r = await client.get(_prices(tenant.slug), headers=tenant.auth(role))
        assert r.status_code == 200, r.text
    # Another workspace's prices and exports are not found, whatever the role.
    for role in ("admin", "member", "finance"):
        assert (await client.get(_prices(tenant.slug), headers=other.auth(role))).status_code == 404
        r = await client.put(_prices(tenant.slug), json=body, headers=other.auth(role))
        assert r.status_code == 404
        r = await client.get(
            f"/api/v1/workspaces/{tenant.slug}/reports/focus",
            params={"from": "2026-11-01", "to": "2026-11-02"},
            headers=other.auth(role),
        )
        assert r.status_code == 404
    assert (await client.get(_prices(tenant.slug))).status_code == 401


async def test_streamed_team_reports_are_the_buffered_ones(app, client) -> None:
    """The API streams the usage report; the pages build it whole: the same bytes, team
    keys (users without a team last) and cost included."""
    tenant = await quick_tenant(app, "money")
    day = await build_fleet(client, tenant)
    await set_team(client, tenant, "alice", "vision")
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        ws = await workspace_id(conn, tenant.slug)
    start, end = day.date().isoformat(), (day + timedelta(days=2)).date().isoformat()
    for group in (
        "team",
        "team,user",
        "user,team",
        "team,day",
        "day,team",
        "team,gpu",
        "host,team",
    ):
        for tz in ("UTC", "Africa/Lagos"):
            window = params.parse_window(start, end, tz)
            keys = groupings.parse_usage_group(group)
            async with runtime.pool.connection() as conn:
                built = await service.usage_report(conn, ws, window, keys)
            assert built.rows, group
            query = {"from": start, "to": end, "tz": tz, "groupBy": group}
            url = f"/api/v1/workspaces/{tenant.slug}/reports/usage"
            r = await client.get(url, params=query, headers=tenant.auth("finance"))
            assert r.content == built.to_json(), (group, tz)
            r = await client.get(url, params={**query, "format": "csv"}, headers=tenant.auth())
            assert r.text == render_csv(built), (group, tz)
            assert built.rows[-1]["team"] is None  # bob, without a team, comes last


# Every usage grouping the pricing paths must agree on (team alone and in pairs).
_GROUPINGS = ("user", "team", "team,user", "team,day", "day,team", "gpu", "host,team", "day")


async def _unpriced_fleet(client: Any, tenant: Any) -> datetime:
    """build_fleet's hours (alice on the A100, bob idle-holding the H100), no prices."""
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
    return day


async def _held_both_ways(
    conn: psycopg.AsyncConnection[Any], ws: int, window: params.Window, group: str
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """held_by's rows as the report reads them (its window's pricing), and as the costed
    source gives them (every price looked up)."""
    keys = groupings.parse_usage_group(group)
    scope = await service.usage_scope(conn, ws, window, day_keyed="day" in keys)
    columns = service.unique([c for k in keys for c in service.KEY_COLUMNS[k]])
    pricing = await window_pricing(conn, ws, window.start, window.end)
    chosen = sorted(await repo.held_by(conn, scope, columns, pricing), key=repr)
    costed = sorted(await repo.held_by(conn, scope, columns, Pricing(True, True)), key=repr)
    await conn.commit()
    return chosen, costed


async def test_without_prices_the_plain_rows_give_the_costed_figures(app, client) -> None:
    """No price in force in the window: the report reads the rollups without pricing
    them, cost null (no currency) or 0 (a currency, prices only later), and every held,
    active and idle-held figure is the costed source's; the streamed bytes still equal
    the buffered report's."""
    tenant = await quick_tenant(app, "money")
    day = await _unpriced_fleet(client, tenant)
    await set_team(client, tenant, "alice", "vision")
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        ws = await workspace_id(conn, tenant.slug)
    start, end = day.date().isoformat(), (day + timedelta(days=2)).date().isoformat()
    url = f"/api/v1/workspaces/{tenant.slug}/reports/usage"

    async def check(cost: float | None, currency: str | None) -> None:
        for group in _GROUPINGS:
            for tz in ("UTC", "Africa/Lagos"):
                window = params.parse_window(start, end, tz)
                async with runtime.pool.connection() as conn:
                    assert await window_pricing(conn, ws, window.start, window.end) == Pricing(
                        False, False
                    )
                    chosen, costed = await _held_both_ways(conn, ws, window, group)
                    built = await service.usage_report(
                        conn, ws, window, groupings.parse_usage_group(group)
                    )
                assert chosen, group
                # Same keys and held, active, idle-held µs; no cost numerator either way.
                assert [r[:-1] for r in chosen] == [r[:-1] for r in costed], (group, tz)
                assert {r[-1] for r in chosen} == {r[-1] for r in costed} == {None}
                assert {(r["cost"], r["currency"]) for r in built.rows} == {(cost, currency)}
                assert (built.totals.cost, built.totals.currency) == (cost, currency)
                query = {"from": start, "to": end, "tz": tz, "groupBy": group}
                r = await client.get(url, params=query, headers=tenant.auth("finance"))
                assert r.content == built.to_json(), (group, tz)
                r = await client.get(url, params={**query, "format": "csv"}, headers=tenant.auth())
                assert r.text == render_csv(built), (group, tz)

    body = await report(
        client, tenant, "usage", groupBy="user", tz="UTC", **{"from": start, "to": end}
    )
    assert {r["user"]: r["heldGpuHours"] for r in body["rows"]} == {"alice": 3.0, "bob": 3.0}
    await check(None, None)

    # A currency with prices only from next week on: nothing in the window is priced,
    # so every cost is 0 in that currency, as the costed rows give it.
    later = (datetime.now(UTC).date() + timedelta(days=7)).isoformat()
    r = await client.put(
        _prices(tenant.slug),
        json={"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": later}]},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    await check(0.0, "EUR")


async def test_star_prices_alone_cost_the_same_without_gpu_models(app, client) -> None:
    """Only `*` prices in force: the costed source skips the GPU models and gives the
    figures and costs it gives with them."""
    tenant = await quick_tenant(app, "money")
    day = await _unpriced_fleet(client, tenant)
    await set_team(client, tenant, "bob", "nlp")
    d = day.date()
    r = await client.put(
        _prices(tenant.slug),
        json={
            "currency": "EUR",
            "prices": [
                {
                    "gpuModel": "*",
                    "perGpuHour": "1.25",
                    "from": (d - timedelta(days=10)).isoformat(),
                },
                # Starts at Lagos midnight, 23:00 UTC inside the UTC day D.
                {"gpuModel": "*", "perGpuHour": 2, "from": (d + timedelta(days=1)).isoformat()},
            ],
        },
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        ws = await workspace_id(conn, tenant.slug)
    start, end = d.isoformat(), (d + timedelta(days=2)).isoformat()
    for group in _GROUPINGS:
        for tz in ("UTC", "Africa/Lagos"):
            window = params.parse_window(start, end, tz)
            async with runtime.pool.connection() as conn:
                assert await window_pricing(conn, ws, window.start, window.end) == Pricing(
                    True, False
                )
                chosen, costed = await _held_both_ways(conn, ws, window, group)
            assert chosen == costed, (group, tz)
    # alice and bob each: 1 h at 1.25 (22:00-23:00 UTC), then 2 h at 2.00.
    body = await report(
        client, tenant, "usage", groupBy="team", tz="UTC", **{"from": start, "to": end}
    )
    assert [(r["team"], r["cost"]) for r in body["rows"]] == [("nlp", 5.25), (None, 5.25)]
    assert body["totals"]["cost"] == 10.5
