"""The budgets report: its figures are the usage report's per team for the same window
(month and quarter edges cut in the workspace's zone, one far from UTC too), every team
is listed, a budget set mid-period holds for the whole period and a later one supersedes
it, a team renamed or emptied keeps its budget visible, a budget of 0, no usage; CSV."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime
from typing import Any

import httpx
import pytest

from tests.board.budget_builders import (
    HOUR_US,
    budgets_report,
    by_team,
    held_in,
    hourly,
    put_budget,
    seed_hours,
    set_prices,
    set_team,
    set_zone,
)
from tests.board.money_builders import base
from tests.board.test_reports_builders import quick_tenant, report

# Around the end of September 2026, UTC: the edge of a month and of a quarter.
EDGE_START = datetime(2026, 9, 29, tzinfo=UTC)
TEAMS = {"vision": {"alice"}, "nlp": {"bob"}}


async def _edge_fixture(app: Any, client: httpx.AsyncClient, zone: str) -> Any:
    tenant = await quick_tenant(app, "bud")
    await set_zone(client, tenant, zone)
    await set_team(client, tenant, "alice", "vision")
    await set_team(client, tenant, "bob", "nlp")
    await set_prices(client, tenant)
    held = hourly(EDGE_START, 4 * 24, {"alice": HOUR_US // 2, "bob": HOUR_US // 4, "carol": 0})
    await seed_hours(app, client, tenant, held)
    return tenant, held


PERIODS = [
    ("2026-09", date(2026, 9, 1), date(2026, 10, 1)),
    ("2026-10", date(2026, 10, 1), date(2026, 11, 1)),
    ("2026-Q3", date(2026, 7, 1), date(2026, 10, 1)),
    ("2026-Q4", date(2026, 10, 1), date(2027, 1, 1)),
]


@pytest.mark.parametrize("zone", ["UTC", "Pacific/Kiritimati", "America/St_Johns"])
async def test_figures_are_the_usage_reports_at_month_and_quarter_edges(
    app: Any, client: httpx.AsyncClient, zone: str
) -> None:
    tenant, held = await _edge_fixture(app, client, zone)
    for period, first, end in PERIODS:
        found = await budgets_report(client, tenant, period)
        usage = await report(
            client,
            tenant,
            "usage",
            **{"from": first.isoformat(), "to": end.isoformat(), "groupBy": "team", "tz": zone},
        )
        # The same window, in the workspace's zone.
        assert (found["from"], found["to"], found["tz"]) == (usage["from"], usage["to"], zone)
        assert datetime.fromisoformat(found["from"]).date() == first
        rows = by_team(found)
        for row in usage["rows"]:
            mine = rows[row["team"]]
            assert mine["usedGpuHours"] == row["heldGpuHours"], (period, row)
            assert mine["cost"] == row["cost"], (period, row)
            assert mine["currency"] == "EUR"
        # And the obvious sum: each hour on the local date its start falls on.
        for team, users in TEAMS.items():
            expected = held_in(held, users, zone, first, end) / HOUR_US
            assert rows[team]["usedGpuHours"] == pytest.approx(expected, abs=1e-6), (period, team)
        # Teams with no budget are listed; nobody's (carol, no team) is `team` null, last.
        assert [r["team"] for r in found["rows"]] == ["nlp", "vision", None]
        assert all(r["status"] == "none" and r["budgetGpuHours"] is None for r in found["rows"])
        # Over (or no use in the last 7 days): the forecast is what was used.
        if datetime.fromisoformat(found["to"]) <= datetime.now(UTC):
            assert found["remainingDays"] == 0
        for r in found["rows"]:
            assert r["forecastGpuHours"] == r["usedGpuHours"]
    # The edge really moves with the zone: September's hours differ between zones.
    september = held_in(held, {"alice"}, zone, date(2026, 9, 1), date(2026, 10, 1))
    assert september != held_in(
        held,
        {"alice"},
        "UTC" if zone != "UTC" else "Asia/Tokyo",
        date(2026, 9, 1),
        date(2026, 10, 1),
    )


async def test_a_budget_set_mid_period_holds_for_all_of_it_until_a_later_one(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant, _ = await _edge_fixture(app, client, "Pacific/Kiritimati")
    out = await put_budget(
        client, tenant, "vision", period="month", gpuHours=30, **{"from": "2026-09-20"}
    )
    assert out == {
        "team": "vision",
        "period": "month",
        "gpuHours": 30.0,
        "amount": None,
        "from": "2026-09-20",
        "periodStart": "2026-09-01",
    }
    await put_budget(
        client, tenant, "vision", period="month", gpuHours=20, **{"from": "2026-10-31"}
    )
    await put_budget(
        client, tenant, "vision", period="quarter", amount="100.5", **{"from": "2026-08-15"}
    )

    def budget(found: dict[str, Any]) -> tuple[Any, Any, Any]:
        row = by_team(found)["vision"]
        return row["budgetGpuHours"], row["budgetAmount"], row["budgetFrom"]

    assert budget(await budgets_report(client, tenant, "2026-08")) == (None, None, None)
    # Set on the 20th, it holds for the whole of September, and on until the next one,
    # which holds for all of October although it was set on its last day.
    assert budget(await budgets_report(client, tenant, "2026-09")) == (30.0, None, "2026-09-20")
    assert budget(await budgets_report(client, tenant, "2026-10")) == (20.0, None, "2026-10-31")
    assert budget(await budgets_report(client, tenant, "2027-02")) == (20.0, None, "2026-10-31")
    # Quarters are budgeted apart from months.
    assert budget(await budgets_report(client, tenant, "2026-Q2")) == (None, None, None)
    assert budget(await budgets_report(client, tenant, "2026-Q3")) == (None, 100.5, "2026-08-15")
    assert budget(await budgets_report(client, tenant, "2026-Q4")) == (None, 100.5, "2026-08-15")
    # Setting the same date again replaces that entry; neither figure ends the budget.
    await put_budget(
        client, tenant, "vision", period="month", gpuHours=25, **{"from": "2026-09-20"}
    )
    await put_budget(client, tenant, "vision", period="month", **{"from": "2026-12-01"})
    assert budget(await budgets_report(client, tenant, "2026-09")) == (25.0, None, "2026-09-20")
    assert budget(await budgets_report(client, tenant, "2026-12")) == (None, None, None)
    listed = (await client.get(f"{base(tenant)}/budgets", headers=tenant.auth("member"))).json()
    assert listed["currency"] == "EUR"
    assert [(b["period"], b["from"], b["gpuHours"], b["amount"]) for b in listed["budgets"]] == [
        ("month", "2026-09-20", 25.0, None),
        ("month", "2026-10-31", 20.0, None),
        ("month", "2026-12-01", None, None),
        ("quarter", "2026-08-15", None, 100.5),
    ]


async def test_shares_and_status_against_hours_and_money(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant, held = await _edge_fixture(app, client, "UTC")
    used = held_in(held, {"alice"}, "UTC", date(2026, 10, 1), date(2026, 11, 1)) / HOUR_US
    cost = by_team(await budgets_report(client, tenant, "2026-10"))["vision"]["cost"]
    assert cost == pytest.approx(used * 1.5, abs=0.01)

    async def status(**budget: Any) -> dict[str, Any]:
        await put_budget(
            client, tenant, "vision", period="month", **{"from": "2026-10-01"}, **budget
        )
        return by_team(await budgets_report(client, tenant, "2026-10"))["vision"]

    row = await status(gpuHours=used * 2)
    assert (row["usedShare"], row["status"]) == (0.5, "ok")
    row = await status(gpuHours=round(used / 0.8, 6))
    assert row["status"] == "warning"
    assert row["usedShare"] == pytest.approx(0.8, abs=1e-6)
    row = await status(gpuHours=round(used, 6))
    assert (row["usedShare"], row["status"]) == (1.0, "exceeded")
    # Money alone: the cost against the amount; both: the larger share counts.
    row = await status(amount=round(cost * 4, 2))
    assert (row["usedShare"], row["status"]) == (0.25, "ok")
    row = await status(gpuHours=used * 4, amount=round(cost / 0.9, 2))
    assert row["usedShare"] == pytest.approx(0.9, abs=1e-3)
    assert row["status"] == "warning"


async def test_a_budget_of_zero_and_a_team_with_no_usage(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant, _ = await _edge_fixture(app, client, "UTC")
    await set_team(client, tenant, "dana", "idle-team")  # in the directory, never held a GPU
    await put_budget(
        client, tenant, "idle-team", period="month", gpuHours=0, **{"from": "2026-01-01"}
    )
    await put_budget(client, tenant, "vision", period="month", gpuHours=0, **{"from": "2026-01-01"})
    rows = by_team(await budgets_report(client, tenant, "2026-10"))
    idle = rows["idle-team"]
    assert (idle["usedGpuHours"], idle["cost"], idle["budgetGpuHours"]) == (0.0, 0.0, 0.0)
    # Nothing used of nothing: no share to speak of, and nothing is wrong.
    assert (idle["usedShare"], idle["forecastShare"], idle["status"]) == (None, None, "ok")
    # Anything used of a budget of 0 is over it.
    vision = rows["vision"]
    assert vision["usedGpuHours"] > 0
    assert (vision["usedShare"], vision["status"]) == (None, "exceeded")
    # A period nobody used at all: every team still listed, all zero.
    empty = by_team(await budgets_report(client, tenant, "2026-03"))
    assert set(empty) == {"idle-team", "nlp", "vision"}
    assert all(r["usedGpuHours"] == 0.0 and r["forecastGpuHours"] == 0.0 for r in empty.values())


async def test_a_team_renamed_or_emptied_keeps_its_budget_in_view(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant, held = await _edge_fixture(app, client, "UTC")
    await put_budget(
        client, tenant, "vision", period="month", gpuHours=1000, **{"from": "2026-01-01"}
    )
    alice = held_in(held, {"alice"}, "UTC", date(2026, 10, 1), date(2026, 11, 1)) / HOUR_US

    # Renamed: alice's hours go to the new name (the directory as it is now); the old
    # name keeps its budget, with nothing used, until it is ended or set again.
    await set_team(client, tenant, "alice", "cv")
    rows = by_team(await budgets_report(client, tenant, "2026-10"))
    assert rows["cv"]["usedGpuHours"] == pytest.approx(alice, abs=1e-6)
    assert rows["cv"]["budgetGpuHours"] is None
    assert rows["cv"]["status"] == "none"
    assert (rows["vision"]["usedGpuHours"], rows["vision"]["budgetGpuHours"]) == (0.0, 1000.0)
    # The old name's budget can still be changed (it is known by its budgets).
    await put_budget(
        client, tenant, "vision", period="month", gpuHours=500, **{"from": "2026-10-01"}
    )

    # Emptied: nobody in the team; its hours are nobody's team's (null), the budget stays.
    await set_team(client, tenant, "alice", None)
    rows = by_team(await budgets_report(client, tenant, "2026-10"))
    assert "cv" not in rows
    assert rows[None]["usedGpuHours"] >= alice - 1e-6
    assert (rows["vision"]["usedGpuHours"], rows["vision"]["budgetGpuHours"]) == (0.0, 500.0)


async def test_the_csv_has_the_rows_money_digits_and_formula_safe_names(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant, _ = await _edge_fixture(app, client, "UTC")
    await set_team(client, tenant, "bob", "=HYPERLINK(1)")
    await put_budget(
        client, tenant, "=HYPERLINK(1)", period="month", amount=12, **{"from": "2026-10-01"}
    )
    found = await budgets_report(client, tenant, "2026-10")
    r = await client.get(
        f"{base(tenant)}/reports/budgets",
        params={"period": "2026-10", "format": "csv"},
        headers=tenant.auth("finance"),
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert f"{tenant.slug}-budgets-2026-10.csv" in r.headers["content-disposition"]
    lines = list(csv.DictReader(io.StringIO(r.text)))
    assert list(lines[0]) == list(found["rows"][0])
    assert [line["team"] for line in lines] == ["'=HYPERLINK(1)", "vision", ""]
    bob = lines[0]
    assert bob["budgetAmount"] == "12.00"
    assert bob["cost"] == f"{by_team(found)['=HYPERLINK(1)']['cost']:.2f}"
    assert bob["usedGpuHours"] == f"{by_team(found)['=HYPERLINK(1)']['usedGpuHours']:.6f}"
    assert bob["budgetFrom"] == "2026-10-01"
    assert bob["status"] in ("ok", "warning", "exceeded")
