"""Prices: what a price list may hold (numbers, currencies and dates, each odd form
refused with a sentence or stored as the number it is), the cost they make (exact
decimal sums), and a price's instant, fixed when it was set whatever the workspace's
zone does later.

Also attacked, and held: the usage report, team statements and the FOCUS file over a
DST month in America/New_York with prices changing at local midnights, shared GPUs and
day rollups refreshed or not: team totals agree to the cent (FOCUS rows differ only by
the documented per-row rounding).
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from tests.board.answers import refused
from tests.board.builders import JSON
from tests.board.money_builders import base, held_hours
from tests.board.test_reports_builders import quick_tenant


async def test_prices_refuse_odd_numbers(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await quick_tenant(app, "price")
    url = f"/api/v1/workspaces/{tenant.slug}/prices"

    def one(per_hour: str, day: str = "2030-01-01", currency: str = '"EUR"') -> bytes:
        return (
            f'{{"currency": {currency}, "prices": [{{"gpuModel": "*", '
            f'"perGpuHour": {per_hour}, "from": "{day}"}}]}}'
        ).encode()

    for body in (
        one("NaN"),
        one('"NaN"'),
        one("Infinity"),
        one("1e309"),
        one("1180591620717411303424"),
        one("-1"),
        one('"1e-7"'),
        one("1", "0001-01-01"),
        one("1", "9999-12-31"),
        one("1", currency='"\\u0000"'),
        one("1", currency='"eur"'),
        one("1", currency='"' + "E" * 1000 + '"'),
    ):
        refused(await client.put(url, content=body, headers={**tenant.auth(), **JSON}), 422)
    r = await client.get(url, headers=tenant.auth())
    assert r.json()["currency"] is None, r.text
    assert r.json()["prices"] == [], r.text


def price_body(per_hour: str, model: str = '"*"', currency: str = '"EUR"') -> bytes:
    return (
        f'{{"currency": {currency}, "prices": [{{"gpuModel": {model}, '
        f'"perGpuHour": {per_hour}, "from": "2030-01-01"}}]}}'
    ).encode()


PRICES_REFUSED = [
    price_body("1e-30"),
    price_body("1e30"),
    price_body('"1e30"'),
    price_body('"-1e-30"'),
    price_body('"Infinity"'),
    price_body('"sNaN"'),
    price_body('"-NaN"'),
    price_body("true"),
    price_body("null"),
    price_body('""'),
    price_body('" "'),
    price_body('"1,5"'),
    price_body('"\\u0661"'),  # an Arabic-Indic one: was stored as 1
    price_body('"\\uff11"'),  # a full-width one: was stored as 1
    price_body('"1_0"'),  # was stored as 10
    price_body('"\\u00a01"'),
    price_body('"1\\n"'),
    price_body("[1]"),
    price_body("1", model='"\\ud800"'),  # a lone surrogate
    price_body("1", model='"\\udfff\\ud800"'),
    price_body("1", model='""'),
    price_body("1", model='"a\\u0000b"'),
    price_body("1", model='"a\\nb"'),
    price_body("1", model='"' + "m" * 101 + '"'),
    price_body("1", model="null"),
    price_body("1", model="42"),
    price_body("1", currency='"Eur"'),
    price_body("1", currency='"EURO"'),
    price_body("1", currency='"\\uff25\\uff35\\uff32"'),  # full-width EUR
    price_body("1", currency='"EUR "'),
    price_body("1", currency='"\\ud800"'),
    price_body("1", currency='"XXX"'),
    price_body("1", currency="null"),
    b'{"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": "2030-02-30"}]}',
    b'{"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": "2030-W01-1"}]}',
    b'{"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": ""}]}',
    b'{"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1}]}',
    b'{"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": "2030-01-01",'
    b' "until": "2029-01-01"}]}',
    b'{"currency": "EUR", "prices": {"gpuModel": "*"}}',
    b'{"currency": "EUR", "prices": null}',
    b'{"currency": "EUR"}',
    b"[]",
    b"",
    b"{",
    b'{"currency": "EUR", "prices": []}' + b" " * 10 + b"x",
    # the same (model, day) twice, reversed in the list
    b'{"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 2, "from": "2030-01-01"},'
    b' {"gpuModel": "*", "perGpuHour": 1, "from": "2030-01-01"}]}',
]


async def test_odd_prices_and_currencies_are_refused_and_change_nothing(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "prices")
    url = f"{base(tenant)}/prices"
    for body in PRICES_REFUSED:
        r = await client.put(url, content=body, headers={**tenant.auth(), **JSON})
        assert 400 <= r.status_code < 500, (body, r.text)
        refused(r, 400, 422)
    shown = (await client.get(url, headers=tenant.auth())).json()
    assert shown["currency"] is None, shown
    assert shown["prices"] == [], shown


async def test_odd_but_fine_prices_are_stored_as_the_number_they_are(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "prices")
    url = f"{base(tenant)}/prices"
    for sent, shown in (
        ('"-0"', 0.0),
        ("-0", 0.0),
        ("-0.0", 0.0),
        ("0.000001", 1e-06),
        ('"1000000.000000"', 1e6),
        ("1E+2", 100.0),
        ('"  2.5  "', 2.5),
    ):
        r = await client.put(url, content=price_body(sent), headers={**tenant.auth(), **JSON})
        if r.status_code == 422:
            refused(r, 422)
            continue
        assert r.status_code == 200, (sent, r.text)
        price = r.json()["prices"][0]["perGpuHour"]
        assert price == shown, (sent, r.text)
        assert str(price) != "-0.0", (sent, r.text)


async def test_cost_totals_are_exact_decimal_sums(app: Any, client: httpx.AsyncClient) -> None:
    """0.1 + 0.2 per GPU-hour, two hours each, and a third model at 1e-6: the total is
    the exact sum of the rows' exact figures, rounded once."""
    tenant = await quick_tenant(app, "sums")
    start = (datetime.now(UTC) - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    models = {"GPU A": "alice", "GPU B": "bob", "GPU C": "carol"}
    await held_hours(client, tenant, start, models)
    day = (start - timedelta(days=5)).date().isoformat()
    body = {
        "currency": "KWD",
        "prices": [
            {"gpuModel": "GPU A", "perGpuHour": "0.1", "from": day},
            {"gpuModel": "GPU B", "perGpuHour": 0.2, "from": day},
            {"gpuModel": "GPU C", "perGpuHour": "0.000001", "from": day},
            {"gpuModel": "*", "perGpuHour": "999999.999999", "from": day},
        ],
    }
    r = await client.put(f"{base(tenant)}/prices", json=body, headers=tenant.auth())
    assert r.status_code == 200, r.text
    end = start + timedelta(hours=3)
    window = f"from={start:%Y-%m-%dT%H:00:00Z}&to={end:%Y-%m-%dT%H:00:00Z}"
    for group in ("user", "gpu", "team", "user,gpu", "team,user"):
        got = (
            await client.get(
                f"{base(tenant)}/reports/usage?{window}&groupBy={group}", headers=tenant.auth()
            )
        ).json()
        costs = {r.get("user", r.get("gpuName")): r["cost"] for r in got["rows"]}
        if group in ("user", "gpu", "user,gpu"):
            assert sorted(costs.values()) == [0.0, 0.2, 0.4], (group, got)
        assert got["totals"]["cost"] == 0.6, (group, got)
        assert got["totals"]["currency"] == "KWD", got
        text = (
            await client.get(
                f"{base(tenant)}/reports/usage?{window}&groupBy={group}&format=csv",
                headers=tenant.auth(),
            )
        ).text
        cells = [Decimal(row["cost"]) for row in csv.DictReader(io.StringIO(text))]
        assert sum(cells) == Decimal("0.6"), (group, text)
    focus = await client.get(f"{base(tenant)}/reports/focus?{window}&tz=UTC", headers=tenant.auth())
    rows = list(csv.DictReader(io.StringIO(focus.text)))
    # A row per model and day: a window across midnight (UTC) splits each model's hours.
    per_model: dict[str, Decimal] = {}
    for row in rows:
        model = row["x_GpuModel"]
        per_model[model] = per_model.get(model, Decimal(0)) + Decimal(row["BilledCost"])
    assert sorted(per_model.values()) == [Decimal("0"), Decimal("0.2"), Decimal("0.4")], focus.text
    assert all("e" not in r["PricingQuantity"].lower() for r in rows), focus.text


async def test_a_price_in_force_stays_fixed_when_the_zone_moves_back(
    app: Any, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A price from today in Kiritimati (UTC+14) began hours ago. Moving the workspace
    to UTC-12, where that date is still ahead, made it "future" again: GET said
    fixed false, and a PUT replaced or deleted a price costs were already computed with.
    Without a correction window a begun price is fixed at once, as it was then; with
    one, the window is judged by the same stored instant."""
    monkeypatch.setattr(app.state.runtime.settings, "price_correction_days", 0)
    tenant = await quick_tenant(app, "zonemove")
    settings = f"{base(tenant)}/settings"
    url = f"{base(tenant)}/prices"
    r = await client.patch(settings, json={"timezone": "Pacific/Kiritimati"}, headers=tenant.auth())
    assert r.status_code == 200, r.text
    today = datetime.now(ZoneInfo("Pacific/Kiritimati")).date().isoformat()
    one = {"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": "1.5", "from": today}]}
    r = await client.put(url, json=one, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert r.json()["prices"][0]["fixed"] is True, r.text
    began = r.json()["prices"][0]["startsAt"]
    r = await client.patch(settings, json={"timezone": "Etc/GMT+12"}, headers=tenant.auth())
    assert r.status_code == 200, r.text

    shown = (await client.get(url, headers=tenant.auth())).json()
    assert [(p["from"], p["startsAt"], p["fixed"]) for p in shown["prices"]] == [
        (today, began, True)
    ], shown
    changed = {"currency": "EUR", "prices": [{"gpuModel": "*", "perGpuHour": 9, "from": today}]}
    detail = refused(await client.put(url, json=changed, headers=tenant.auth()), 409)
    assert "cannot change" in detail, detail
    # Sent again unchanged, or left out: kept either way.
    for body in (one, {"currency": "EUR", "prices": []}):
        r = await client.put(url, json=body, headers=tenant.auth())
        assert r.status_code == 200, r.text
        assert [(p["from"], p["perGpuHour"]) for p in r.json()["prices"]] == [(today, 1.5)]
    # A price from tomorrow in the new zone is still the future's to set.
    later = (datetime.now(ZoneInfo("Etc/GMT+12")).date() + timedelta(days=3)).isoformat()
    both = {"currency": "EUR", "prices": [*one["prices"], {**one["prices"][0], "from": later}]}
    r = await client.put(url, json=both, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert [p["fixed"] for p in r.json()["prices"]] == [True, False], r.text


async def test_a_price_not_begun_keeps_its_instant_when_the_zone_moves_ahead(
    app: Any, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From UTC-12 to UTC+14: a price from tomorrow (UTC-12) is dated today or earlier in
    the new zone but has not begun. Sent again unchanged it keeps its stored instant
    (never one in the past); changed it is a 409 (a new price dated back, once another
    is fixed: here without a correction window); left out it goes."""
    monkeypatch.setattr(app.state.runtime.settings, "price_correction_days", 0)
    tenant = await quick_tenant(app, "zoneahead")
    settings = f"{base(tenant)}/settings"
    url = f"{base(tenant)}/prices"
    r = await client.patch(settings, json={"timezone": "Etc/GMT+12"}, headers=tenant.auth())
    assert r.status_code == 200, r.text
    soon = (datetime.now(ZoneInfo("Etc/GMT+12")).date() + timedelta(days=1)).isoformat()
    prices = [
        {"gpuModel": "*", "perGpuHour": 1, "from": "2026-01-01"},
        {"gpuModel": "*", "perGpuHour": 2, "from": soon},
    ]
    r = await client.put(url, json={"currency": "EUR", "prices": prices}, headers=tenant.auth())
    assert r.status_code == 200, r.text
    began = r.json()["prices"][1]["startsAt"]
    r = await client.patch(settings, json={"timezone": "Pacific/Kiritimati"}, headers=tenant.auth())
    assert r.status_code == 200, r.text
    shown = (await client.get(url, headers=tenant.auth())).json()["prices"]
    assert [(p["from"], p["startsAt"], p["fixed"]) for p in shown][1] == (soon, began, False)
    r = await client.put(url, json={"currency": "EUR", "prices": prices}, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert [(p["startsAt"], p["fixed"]) for p in r.json()["prices"]][1] == (began, False)
    changed = [prices[0], {**prices[1], "perGpuHour": 3}]
    r = await client.put(url, json={"currency": "EUR", "prices": changed}, headers=tenant.auth())
    assert "and that has begun" in refused(r, 409)
    r = await client.put(
        url, json={"currency": "EUR", "prices": [prices[0]]}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    assert [p["from"] for p in r.json()["prices"]] == ["2026-01-01"], r.text
