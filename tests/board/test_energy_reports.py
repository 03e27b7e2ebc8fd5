"""Energy in the reports, the statements and the FOCUS export, with hand-computed figures
(tests/board/energy_builders.py draws the fleet): a GPU reporting no power (energy
partial: energyCoveredHours < coveredHours), a gap, two holders, an electricity price
and a carbon intensity that change in the middle of a UTC day, cost and CO2e rounded
once per row; another workspace's rates never apply, and without a rate in force the
cost and CO2e are null, never 0.
"""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from typing import Any

import httpx

from board.reportkit.params import parse_window
from board.reports.idle_energy import idle_held_energy
from board.runtime import Runtime
from tests.board.db import scalar
from tests.board.energy_builders import ZONE, energy_fleet, window
from tests.board.test_reports_builders import quick_tenant, report

ENERGY = (
    "energyKWh",
    "activeEnergyKWh",
    "idleHeldEnergyKWh",
    "energyCoveredHours",
    "energyCost",
    "co2eKg",
)


def _energy(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[k] for k in ENERGY)


async def test_usage_by_user_is_each_users_share(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await quick_tenant(app, "energy")
    day = await energy_fleet(app, client, tenant)
    body = await report(client, tenant, "usage", groupBy="user", **window(day))
    rows = {r["user"]: r for r in body["rows"]}
    # alice: half of 0.2 kWh idle-held with bob (0.20 €, 400 g), an hour with no power
    # reading (held, no energy), then 0.3 + 0.2 active and 0.1 idle-held at 0.50 €, 250 g.
    assert _energy(rows["alice"]) == (0.7, 0.5, 0.2, 3.0, 0.32, 0.19)
    assert rows["alice"]["heldGpuHours"] == 4.0  # energy partial: 3 of 4 held hours
    assert _energy(rows["bob"]) == (0.1, 0.0, 0.1, 0.5, 0.02, 0.04)
    assert _energy(rows["carol"]) == (0.2, 0.0, 0.2, 2.0, 0.1, 0.05)
    # The GPU-hour cost is there as before ("*" 1.00 per held hour).
    assert (rows["alice"]["cost"], rows["bob"]["cost"], rows["carol"]["cost"]) == (4.0, 0.5, 2.0)
    assert _energy(body["totals"]) == (1.0, 0.5, 0.5, 5.5, 0.44, 0.28)

    teams = await report(client, tenant, "usage", groupBy="team", **window(day))
    assert [_energy(r) for r in teams["rows"]] == [(1.0, 0.5, 0.5, 5.5, 0.44, 0.28)]


async def test_usage_by_gpu_and_day_is_the_gpus_own(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await quick_tenant(app, "energy")
    day = await energy_fleet(app, client, tenant)
    body = await report(client, tenant, "usage", groupBy="gpu", **window(day))
    gpus = {r["gpuIndex"]: r for r in body["rows"]}
    # GPU-0: every state; 3.5 of its 4.5 covered hours had a power reading. 0.2 kWh at
    # 0.20 and 0.6 at 0.50.
    assert gpus[0]["coveredGpuHours"] == 4.5
    assert _energy(gpus[0]) == (0.8, 0.5, 0.3, 3.5, 0.34, 0.23)
    # GPU-1: 0.13 kWh idle (nobody's), 0.2 idle-held by carol; 0.10 at 0.20 and 0.23 at
    # 0.50 = 0.135 €, rounded once for the row (half to even: 0.14).
    assert _energy(gpus[1]) == (0.33, 0.0, 0.2, 4.5, 0.14, 0.0975)
    # The total is the exact 0.475 rounded once (0.48), not 0.34 + 0.14.
    assert _energy(body["totals"]) == (1.13, 0.5, 0.5, 8.0, 0.48, 0.3275)

    host = await report(client, tenant, "usage", groupBy="host", **window(day))
    assert [_energy(r) for r in host["rows"]] == [(1.13, 0.5, 0.5, 8.0, 0.48, 0.3275)]

    days = await report(client, tenant, "usage", groupBy="day", **window(day), tz=ZONE)
    by_day = {r["day"]: r for r in days["rows"]}
    d = day.date()
    # Lagos day d: GPU-0's 0.2 kWh idle-held (then an hour with no reading) and GPU-1's
    # 0.1 idle, at 0.20 and 400 g. Day d+1 (from D+23:00 UTC): 0.83 kWh at 0.50 = 0.415,
    # half to even 0.42; 250 g.
    assert _energy(by_day[d.isoformat()]) == (0.3, 0.0, 0.2, 3.0, 0.06, 0.12)
    assert _energy(by_day[(d + timedelta(days=1)).isoformat()]) == (
        0.83,
        0.5,
        0.3,
        5.0,
        0.42,
        0.2075,
    )


async def test_utilization_rows_and_the_streamed_csv(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await quick_tenant(app, "energy")
    day = await energy_fleet(app, client, tenant)
    body = await report(
        client, tenant, "utilization", groupBy="gpu", bucket="day", tz=ZONE, **window(day)
    )
    fields = ("coveredHours", "energyKWh", "idleEnergyKWh", "avgPowerW", "energyCoveredHours")
    got = [(r["gpuIndex"], *(r[f] for f in fields)) for r in body["rows"]]
    assert got == [
        # GPU-0, day d: 0.2 kWh over the 1 of its 2 hours that had a reading: 200 W.
        (0, 2.0, 0.2, 0.0, 200.0, 1.0),
        (0, 2.5, 0.6, 0.0, 240.0, 2.5),
        (1, 2.0, 0.1, 0.1, 50.0, 2.0),
        (1, 2.5, 0.23, 0.03, 92.0, 2.5),
    ]
    # Per host and hour: at D+22 only GPU-1 read its power.
    hourly = await report(
        client, tenant, "utilization", groupBy="host", bucket="hour", **window(day)
    )
    at = (day + timedelta(hours=22)).isoformat()
    (row,) = [r for r in hourly["rows"] if r["bucketStart"] == at]
    assert tuple(row[f] for f in fields) == (2.0, 0.05, 0.05, 50.0, 1.0)
    # An hour of nothing but a gap has no row; an hour with time but no power reading
    # says null, not 0 W.
    empty = await report(client, tenant, "utilization", groupBy="gpu", bucket="hour", **window(day))
    gpu0 = {r["bucketStart"]: r for r in empty["rows"] if r["gpuIndex"] == 0}
    assert (day + timedelta(hours=26)).isoformat() not in gpu0
    assert gpu0[at]["avgPowerW"] is None
    assert gpu0[at]["energyCoveredHours"] == 0.0

    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/utilization",
        params={"groupBy": "gpu", "bucket": "day", "tz": ZONE, "format": "csv", **window(day)},
        headers=tenant.auth("member"),
    )
    assert r.status_code == 200, r.text
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [(x["energyKWh"], x["avgPowerW"]) for x in rows] == [
        ("0.200000", "200.000000"),
        ("0.600000", "240.000000"),
        ("0.100000", "50.000000"),
        ("0.230000", "92.000000"),
    ]


async def test_usage_csv_cells_are_plain_numbers(app: Any, client: httpx.AsyncClient) -> None:
    """The new cells are the board's own numbers, never text a spreadsheet would run;
    money with the currency's digits, as `cost`."""
    tenant = await quick_tenant(app, "energy")
    day = await energy_fleet(app, client, tenant)
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/usage",
        params={"groupBy": "gpu", "format": "csv", **window(day)},
        headers=tenant.auth("finance"),
    )
    assert r.status_code == 200, r.text
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [[row[k] for k in ENERGY] for row in rows] == [
        ["0.800000", "0.500000", "0.300000", "3.500000", "0.34", "0.230000"],
        ["0.330000", "0.000000", "0.200000", "4.500000", "0.14", "0.097500"],
    ]
    for row in rows:
        for k in ENERGY:
            assert row[k][:1] not in "=+-@'\t\r\n", (k, row[k])


async def test_streamed_bodies_are_the_buffered_ones(app: Any, client: httpx.AsyncClient) -> None:
    """With rates in force too: the API's streamed JSON and CSV are the bytes of the
    buffered report (the pages' path) and of its CSV (money with the currency's digits)."""
    from board.reportkit.csv import render_csv
    from board.reports import groupings, service

    tenant = await quick_tenant(app, "energy")
    day = await energy_fleet(app, client, tenant)
    ws = await scalar(app, "SELECT id FROM workspaces WHERE slug = %s", tenant.slug)
    bounds = window(day)
    runtime: Runtime = app.state.runtime
    for group in ("user", "team,user", "gpu", "host,day", "day,user"):
        for tz in ("UTC", ZONE):
            async with runtime.pool.connection() as conn:
                built = await service.usage_report(
                    conn,
                    ws,
                    parse_window(bounds["from"], bounds["to"], tz),
                    groupings.parse_usage_group(group),
                )
            query = {**bounds, "groupBy": group, "tz": tz}
            url = f"/api/v1/workspaces/{tenant.slug}/reports/usage"
            r = await client.get(url, params=query, headers=tenant.auth("finance"))
            assert r.content == built.to_json(), (group, tz)
            r = await client.get(url, params={**query, "format": "csv"}, headers=tenant.auth())
            assert r.text == render_csv(built), (group, tz)
            assert any(row["energyCost"] for row in built.rows), (group, tz)


async def test_another_workspaces_rates_never_apply(app: Any, client: httpx.AsyncClient) -> None:
    """The same fleet in a workspace with no rates: the energy, but neither cost nor
    CO2e (null, never 0); with an intensity only, CO2e and still no cost; with a price
    from d+1 only, a cost for the rows (and the day) it covers whole."""
    priced = await quick_tenant(app, "energy")
    await energy_fleet(app, client, priced)
    bare = await quick_tenant(app, "energy")
    day = await energy_fleet(app, client, bare, priced=False)
    body = await report(client, bare, "usage", groupBy="user", **window(day))
    alice = next(r for r in body["rows"] if r["user"] == "alice")
    assert _energy(alice) == (0.7, 0.5, 0.2, 3.0, None, None)
    assert (body["totals"]["energyCost"], body["totals"]["co2eKg"]) == (None, None)

    d = day.date()
    base = f"/api/v1/workspaces/{bare.slug}"
    carbon = {"values": [{"gramsPerKWh": "400.5", "from": (d - timedelta(days=1)).isoformat()}]}
    r = await client.put(f"{base}/carbon-intensity", json=carbon, headers=bare.auth())
    assert r.status_code == 200, r.text
    body = await report(client, bare, "usage", groupBy="user", **window(day))
    alice = next(r for r in body["rows"] if r["user"] == "alice")
    assert _energy(alice) == (0.7, 0.5, 0.2, 3.0, None, 0.28035)

    # A currency, and a price from d+1 only: GPU-0's hours of day d are unpriced.
    r = await client.put(
        f"{base}/prices", json={"currency": "EUR", "prices": []}, headers=bare.auth()
    )
    assert r.status_code == 200, r.text
    one = {"prices": [{"perKWh": 1, "from": (d + timedelta(days=1)).isoformat()}]}
    r = await client.put(f"{base}/energy-prices", json=one, headers=bare.auth())
    assert r.status_code == 200, r.text
    gpus = await report(client, bare, "usage", groupBy="gpu", **window(day))
    assert [r["energyCost"] for r in gpus["rows"]] == [None, None]
    assert gpus["totals"]["energyCost"] is None
    days = await report(client, bare, "usage", groupBy="day", tz=ZONE, **window(day))
    assert [r["energyCost"] for r in days["rows"]] == [None, 0.83]


async def test_statements_focus_and_the_idle_held_energy(
    app: Any, client: httpx.AsyncClient
) -> None:
    from board.money import statements

    tenant = await quick_tenant(app, "energy")
    day = await energy_fleet(app, client, tenant)
    ws = await scalar(app, "SELECT id FROM workspaces WHERE slug = %s", tenant.slug)
    bounds = window(day)
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        currency, teams = await statements.month_figures(
            conn, ws, parse_window(bounds["from"], bounds["to"], ZONE)
        )
        burned = await idle_held_energy(conn, ws, parse_window(bounds["from"], bounds["to"], ZONE))
    lines = {line.linux_user: line for line in teams[None].lines}
    assert (lines["alice"].energy_kwh, lines["alice"].energy_cost, lines["alice"].co2e_kg) == (
        0.7,
        "0.32",
        0.19,
    )
    summary = statements.summary(None, teams[None], currency)
    assert (summary.energy_kwh, summary.energy_cost, summary.co2e_kg) == (1.0, "0.44", 0.28)
    found = statements.statement("x", day.date().replace(day=1), ZONE, None, teams, currency)
    rows = list(csv.DictReader(io.StringIO(statements.statement_csv(found))))
    assert [(r["linuxUser"], r["energyKWh"], r["energyCost"], r["co2eKg"]) for r in rows] == [
        ("alice", "0.700000", "0.32", "0.190000"),
        ("bob", "0.100000", "0.02", "0.040000"),
        ("carol", "0.200000", "0.10", "0.050000"),
        ("(total)", "1.000000", "0.44", "0.280000"),
    ]
    # Idle-held: alice's and bob's halves at 0.20 (0.2 kWh), alice's and carol's 0.3 kWh
    # at 0.50: 0.19 €; 80 g + 75 g.
    assert burned.model_dump() == {"kWh": 0.5, "cost": 0.19, "currency": "EUR", "co2eKg": 0.155}

    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/focus",
        params={**bounds, "tz": ZONE},
        headers=tenant.auth("finance"),
    )
    assert r.status_code == 200, r.text
    focus = list(csv.DictReader(io.StringIO(r.text)))
    got = {(f["ChargePeriodStart"][:10], f["x_LinuxUser"]): f for f in focus}
    assert len(got) == len(focus) == 4
    d = day.date()
    first = (day - timedelta(hours=1)).date().isoformat()  # Lagos day d begins D-1h UTC
    assert first == (d - timedelta(days=1)).isoformat()
    alice_d = got[(first, "alice")]
    assert (alice_d["x_EnergyKWh"], alice_d["x_CO2eKg"]) == ("0.100000", "0.040000")
    alice_next = got[(d.isoformat(), "alice")]
    assert (alice_next["x_EnergyKWh"], alice_next["x_CO2eKg"]) == ("0.600000", "0.150000")
