"""Hostile input on the admin and finance surfaces: budgets, capacity, maintenance
windows, retiring GPUs, electricity prices and carbon intensity. Each case is one a probe
found answered wrongly (a 500, a window that never runs, a figure the CSV changed, a
signed zero), or a boundary no other test held: a 4xx with a sentence, nothing changed."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from board.health.windows import WindowRule, occurrences
from tests.board.answers import audit_rows, refused
from tests.board.budget_builders import set_prices, set_team, set_zone
from tests.board.builders import enroll, make_tenant
from tests.board.db import scalar
from tests.board.money_builders import base
from tests.board.test_reports_builders import quick_tenant
from tests.web.helpers import admin_browser

JSON_TYPE = {"content-type": "application/json"}
# A figure written -0 or -0.0 (not the "-0" inside a date such as 2026-01-02).
SIGNED_ZERO = re.compile(r'[:"\s]-0(\.0*)?["},]')


@pytest.mark.parametrize("period", ["9999-12", "9999-Q4", "0000-01", "0000-Q1", "2101-01"])
async def test_a_period_past_the_years_budgets_cover_is_a_sentence(
    app: Any, client: httpx.AsyncClient, period: str
) -> None:
    """9999-12 ended in year 10000: the date was made before the year was checked (500)."""
    tenant = await quick_tenant(app, "span")
    for fmt in ("json", "csv"):
        r = await client.get(
            f"{base(tenant)}/reports/budgets",
            params={"period": period, "format": fmt},
            headers=tenant.auth("finance"),
        )
        assert "budgets cover 2000 to 2100" in refused(r, 422)


async def test_the_budgets_page_and_its_csv_refuse_year_9999_too(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "bspan")
    b, _ = await admin_browser(app, tenant)
    try:
        page = await b.get(f"/w/{tenant.slug}/budgets", params={"period": "9999-12"})
        assert page.status_code == 422, page.text[:300]
        assert "budgets cover 2000 to 2100" in page.text
        sheet = await b.get(f"/w/{tenant.slug}/budgets.csv", params={"period": "9999-Q4"})
        assert sheet.status_code == 422, sheet.text[:300]
    finally:
        await b.aclose()


@pytest.mark.parametrize("period", ["2000-01", "2000-Q1", "2100-12", "2100-Q4"])
@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "Etc/GMT+12"])
async def test_the_first_and_last_periods_answer_in_zones_far_from_utc(
    app: Any, client: httpx.AsyncClient, period: str, zone: str
) -> None:
    tenant = await quick_tenant(app, "edge")
    await set_zone(client, tenant, zone)
    for fmt in ("json", "csv"):
        r = await client.get(
            f"{base(tenant)}/reports/budgets",
            params={"period": period, "format": fmt},
            headers=tenant.auth("finance"),
        )
        assert r.status_code == 200, r.text[:300]


async def test_a_negative_zero_budget_is_zero(app: Any, client: httpx.AsyncClient) -> None:
    """-0 passes `ge=0`; the answer and the audit said -0.0 and "-0" while the table
    holds 0."""
    tenant = await quick_tenant(app, "nzero")
    await set_team(client, tenant, "alice", "vision")
    body = {"period": "month", "gpuHours": "-0", "amount": -0.0, "from": "2026-12-01"}
    r = await client.put(f"{base(tenant)}/budgets/vision", json=body, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert '"gpuHours":0.0,' in r.text, r.text
    assert '"amount":0.0,' in r.text, r.text
    assert not SIGNED_ZERO.search(r.text), r.text
    listed = await client.get(f"{base(tenant)}/budgets", headers=tenant.auth())
    assert not SIGNED_ZERO.search(listed.text), listed.text
    detail = await scalar(
        app, "SELECT detail::text FROM audit_events WHERE action = 'budget.put' ORDER BY id DESC"
    )
    assert not SIGNED_ZERO.search(detail), detail
    # Exponent notation is the number it writes.
    body = {"period": "month", "gpuHours": "1E+2", "from": "2026-12-01"}
    r = await client.put(f"{base(tenant)}/budgets/vision", json=body, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert r.json()["gpuHours"] == 100.0


async def test_a_budget_with_more_decimals_than_the_currency_keeps_them_in_the_csv(
    app: Any, client: httpx.AsyncClient
) -> None:
    """An amount takes 4 decimals whatever the currency: JPY 1.5 was written "2" (and EUR
    100.1234 "100.12") while the JSON said 1.5, a budget the file did not have."""
    tenant = await quick_tenant(app, "digits")
    await set_team(client, tenant, "alice", "vision")
    await set_team(client, tenant, "bob", "nlp")
    await set_team(client, tenant, "carol", "ml")
    r = await client.put(
        f"{base(tenant)}/prices", json={"currency": "JPY", "prices": []}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    for team, amount in (("vision", "1.5"), ("nlp", "6000"), ("ml", "0.0001")):
        body = {"period": "month", "amount": amount, "from": "2026-12-01"}
        r = await client.put(f"{base(tenant)}/budgets/{team}", json=body, headers=tenant.auth())
        assert r.status_code == 200, r.text
    r = await client.get(
        f"{base(tenant)}/reports/budgets",
        params={"period": "2026-12", "format": "csv"},
        headers=tenant.auth("finance"),
    )
    assert r.status_code == 200, r.text
    rows = {row["team"]: row for row in csv.DictReader(io.StringIO(r.text, newline=""))}
    assert rows["vision"]["budgetAmount"] == "1.5"
    assert rows["nlp"]["budgetAmount"] == "6000"
    assert rows["ml"]["budgetAmount"] == "0.0001"
    assert rows["vision"]["cost"] == "0"  # costs keep the currency's digits


async def test_budgets_csv_in_euro_keeps_two_digits_and_a_fourth(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "eurdig")
    await set_team(client, tenant, "alice", "vision")
    await set_team(client, tenant, "bob", "nlp")
    await set_prices(client, tenant)
    for team, amount in (("vision", "100.1234"), ("nlp", "6000")):
        body = {"period": "month", "amount": amount, "from": "2026-12-01"}
        r = await client.put(f"{base(tenant)}/budgets/{team}", json=body, headers=tenant.auth())
        assert r.status_code == 200, r.text
    r = await client.get(
        f"{base(tenant)}/reports/budgets",
        params={"period": "2026-12", "format": "csv"},
        headers=tenant.auth("finance"),
    )
    rows = {row["team"]: row for row in csv.DictReader(io.StringIO(r.text, newline=""))}
    assert rows["vision"]["budgetAmount"] == "100.1234"
    assert rows["nlp"]["budgetAmount"] == "6000.00"
    assert rows["nlp"]["cost"] == "0.00"


async def test_figures_too_long_to_read_are_a_4xx(app: Any, client: httpx.AsyncClient) -> None:
    """A 5,000-digit number is past what Python reads as an int; a huge exponent is past
    every bound: a 400 or 422 with a sentence, nothing stored."""
    tenant = await quick_tenant(app, "huge")
    await set_team(client, tenant, "alice", "vision")
    r = await client.put(
        f"{base(tenant)}/prices", json={"currency": "EUR", "prices": []}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    digits = b"1" + b"0" * 5000
    day = b', "from": "2026-12-01"'
    for path, body in (
        ("budgets/vision", b'{"period": "month", "amount": ' + digits + b', "from": "2026-12-01"}'),
        ("energy-prices", b'{"prices": [{"perKWh": ' + digits + b', "from": "2026-12-01"}]}'),
        ("carbon-intensity", b'{"values": [{"gramsPerKWh": ' + digits + day + b"}]}"),
        ("budgets/vision", b'{"period": "month", "amount": "1e999999999", "from": "2026-12-01"}'),
        ("energy-prices", b'{"prices": [{"perKWh": "1e999999999", "from": "2026-12-01"}]}'),
        ("prices/2026-12-01/*", b'{"perGpuHour": "1e-999999999"}'),
    ):
        r = await client.put(
            f"{base(tenant)}/{path}", content=body, headers={**tenant.auth(), **JSON_TYPE}
        )
        refused(r, 400, 422)
    assert await scalar(app, "SELECT count(*) FROM budgets") == 0
    assert await scalar(app, "SELECT count(*) FROM energy_prices") == 0


# Europe/Berlin's clocks go back at 03:00 CEST on 2026-10-25: 02:30 CEST is 00:30 UTC and
# 02:10 CET is 01:10 UTC, 40 real minutes that end before they start on the wall.
ACROSS_FALL_BACK = {"start": "2026-10-25T02:30:00+02:00", "end": "2026-10-25T02:10:00+01:00"}


@pytest.mark.parametrize("recurrence", ["daily", "weekly"])
async def test_a_repeating_window_that_ends_before_it_starts_on_the_wall_is_refused(
    app: Any, client: httpx.AsyncClient, recurrence: str
) -> None:
    """It was stored (201) and never ran, not even its first occurrence: capacity
    offered the host and notices fired through what the admin had planned."""
    tenant = await quick_tenant(app, "fallw")
    await set_zone(client, tenant, "Europe/Berlin")
    host = await enroll(client, tenant, "node-a")
    url = f"{base(tenant)}/hosts/{host['hostId']}/maintenance"
    audited = await audit_rows(app, tenant.slug)
    body = {**ACROSS_FALL_BACK, "recurrence": recurrence}
    detail = refused(await client.post(url, json=body, headers=tenant.auth()), 422)
    for words in ("02:10", "02:30", "Europe/Berlin"):
        assert words in detail, detail
    assert await audit_rows(app, tenant.slug) == audited
    # Once, it is 40 minutes like any other; repeating at the same instant's wall times
    # one hour apart on the wall (02:30 CEST to 02:30 CET) is refused too.
    once = await client.post(url, json=ACROSS_FALL_BACK, headers=tenant.auth())
    assert once.status_code == 201, once.text
    same_wall = {
        "start": "2026-10-25T02:30:00+02:00",
        "end": "2026-10-25T02:30:00+01:00",
        "recurrence": recurrence,
    }
    refused(await client.post(url, json=same_wall, headers=tenant.auth()), 422)
    # A window across the spring change still repeats (its wall times are in order).
    spring = {
        "start": "2027-03-28T01:30:00+01:00",
        "end": "2027-03-28T03:30:00+02:00",
        "recurrence": recurrence,
    }
    made = await client.post(url, json=spring, headers=tenant.auth())
    assert made.status_code == 201, made.text
    assert made.json()["nextStart"] == "2027-03-28T00:30:00+00:00"


def test_such_a_window_has_no_occurrence_at_all() -> None:
    """Why it is refused: the rule as stored would yield nothing."""
    start = datetime.fromisoformat(ACROSS_FALL_BACK["start"]).astimezone(UTC)
    end = datetime.fromisoformat(ACROSS_FALL_BACK["end"]).astimezone(UTC)
    rule = WindowRule(1, "w", start, end, "daily", "Europe/Berlin", None, "")
    assert occurrences(rule, start - timedelta(days=1), start + timedelta(days=30)) == []


@pytest.mark.parametrize(
    "body",
    [
        {"start": "0001-01-01T00:00:00+01:00", "end": "2030-01-01T00:00:00Z"},
        {"start": "2030-01-01T00:00:00Z", "end": "9999-12-31T23:59:59-12:00"},
        {"start": 1e300, "end": 1e301},
        {"start": "2030-01-01T00:00Z", "end": "2030-01-01T01:00Z", "note": "x\u0000y"},
    ],
)
async def test_windows_at_the_ends_of_time_are_a_sentence(
    app: Any, client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    tenant = await quick_tenant(app, "ends")
    host = await enroll(client, tenant, "node-a")
    url = f"{base(tenant)}/hosts/{host['hostId']}/maintenance"
    refused(await client.post(url, json=body, headers=tenant.auth()), 422)
    assert await scalar(app, "SELECT count(*) FROM host_maintenance_windows") == 0


async def test_windows_from_1970_to_9000_stay_cheap_to_read(
    app: Any, client: httpx.AsyncClient
) -> None:
    """A daily window from 1970 without end and one starting in 8999: the list, the
    capacity over a year ahead and the fleet's windows compute a handful of occurrences
    each, not one per day since 1970."""
    tenant = await quick_tenant(app, "epoch")
    host = await enroll(client, tenant, "node-a")
    url = f"{base(tenant)}/hosts/{host['hostId']}/maintenance"
    for body in (
        {"start": "1970-01-01T00:00Z", "end": "1970-01-01T00:30Z", "recurrence": "daily"},
        {"start": "8999-12-31T23:00Z", "end": "8999-12-31T23:30Z", "recurrence": "weekly"},
        {
            "start": "2026-01-01T00:00Z",
            "end": "2026-01-01T00:30Z",
            "recurrence": "weekly",
            "until": "8999-01-01T00:00Z",
        },
    ):
        r = await client.post(url, json=body, headers=tenant.auth())
        assert r.status_code == 201, r.text
    listed = await client.get(url, headers=tenant.auth("member"))
    assert listed.status_code == 200, listed.text
    assert [w["nextStart"] is not None for w in listed.json()["windows"]] == [True, True, True]
    ahead = datetime.now(UTC).date() + timedelta(days=2)
    r = await client.get(
        f"{base(tenant)}/capacity",
        params={"from": ahead.isoformat(), "to": (ahead + timedelta(days=360)).isoformat()},
        headers=tenant.auth("member"),
    )
    assert r.status_code == 200, r.text


async def test_capacity_refuses_times_past_the_calendar_and_huge_counts(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "capx")
    await set_zone(client, tenant, "Pacific/Kiritimati")
    url = f"{base(tenant)}/capacity"
    for params in (
        {"from": "0001-01-01T00:00+01:00", "to": "2030-01-02"},
        {"from": "9999-12-31", "to": "9999-12-31T23:59"},
        {"gpus": str(10**9)},
        {"minFreeMemoryMb": str(2**63)},
        {"gpus": "\uff11"},  # a full-width 1
        {"model": "x" * 10_000},
        {"model": "A100\u202e"},
        {"from": "T1" * 5000 + " 01", "to": "2030-01-02"},
    ):
        refused(await client.get(url, params=params, headers=tenant.auth("member")), 422)
    # Repeated parameters: the last one is the question, and it is checked as any.
    r = await client.get(f"{url}?gpus=1&gpus=5000", headers=tenant.auth("member"))
    refused(r, 422)


async def test_finance_and_members_cannot_change_money_or_fleet_health(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "roles")
    await set_team(client, tenant, "alice", "vision")
    host = await enroll(client, tenant, "node-a")
    hosts = f"{base(tenant)}/hosts/{host['hostId']}"
    changes: list[tuple[str, str, Any]] = [
        ("PUT", "budgets/vision", {"period": "month", "gpuHours": 1, "from": "2026-12-01"}),
        ("PUT", "prices", {"currency": "EUR", "prices": []}),
        ("PUT", "prices/2026-12-01/*", {"perGpuHour": 1}),
        ("PUT", "energy-prices", {"prices": []}),
        ("PUT", "carbon-intensity", {"values": []}),
        ("DELETE", "energy-prices/2026-12-01", None),
        ("DELETE", "carbon-intensity/2026-12-01", None),
    ]
    audited = await audit_rows(app, tenant.slug)
    for role in ("member", "finance"):
        for method, path, body in changes:
            r = await client.request(
                method, f"{base(tenant)}/{path}", json=body, headers=tenant.auth(role)
            )
            refused(r, 403)
        window = {"start": "2030-01-01T00:00Z", "end": "2030-01-01T01:00Z"}
        r = await client.post(f"{hosts}/maintenance", json=window, headers=tenant.auth(role))
        refused(r, 403)
        refused(await client.post(f"{hosts}/gpus/GPU-0/retire", headers=tenant.auth(role)), 403)
    assert await audit_rows(app, tenant.slug) == audited
    # Another workspace's admin: the host is not found, whatever the body holds.
    other = await quick_tenant(app, "roleo")
    foreign = hosts.replace(f"/{tenant.slug}/", f"/{other.slug}/")
    refused(await client.post(f"{foreign}/gpus/GPU-0/retire", headers=other.auth()), 404)
    refused(await client.post(f"{foreign}/maintenance", json={}, headers=other.auth()), 404)
