"""Team statements over plain HTTP: the month per team, its CSV, tenancy and hostile names.

The fleet is tests/board/money_builders.py's: alice (team vision) holds an A100 for three
hours and costs 2.00 + 3.00 + 3.00 EUR; bob (no team) holds an H100 idle for three hours
at 1.00. The hours fall on two dates of the workspace's zone (Africa/Lagos): date d has
one hour of each, d+1 two; when d and d+1 are in different months, each month's
statement has its own part.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx

from tests.board.builders import make_tenant
from tests.board.money_builders import A100, build_fleet, set_team
from tests.web.helpers import sign_in

EVIL = '=HYPERLINK("http://evil.example","x")'


def _months(day) -> dict[str, tuple[Decimal, Decimal]]:
    """alice's and bob's expected cost per month (YYYY-MM) of the Lagos dates d, d+1."""
    d0, d1 = day.date(), day.date() + timedelta(days=1)
    months: dict[str, tuple[Decimal, Decimal]] = {}
    for date_, alice, bob in (
        (d0, Decimal("2.00"), Decimal("1.00")),
        (d1, Decimal("6.00"), Decimal("2.00")),
    ):
        key = date_.strftime("%Y-%m")
        before = months.get(key, (Decimal(0), Decimal(0)))
        months[key] = (before[0] + alice, before[1] + bob)
    return months


async def test_statements_per_team_page_and_csv(app, client) -> None:
    tenant = await make_tenant(app, "stmt")
    day = await build_fleet(client, tenant)
    await set_team(client, tenant, "alice", "vision")
    assert (await sign_in(client, "finance@stmt.example")).status_code == 303

    for month, (alice, bob) in _months(day).items():
        overview = await client.get("/w/stmt/statements", params={"month": month})
        assert overview.status_code == 200, overview.text
        assert "vision" in overview.text
        assert "No team" in overview.text
        assert f"{alice:.2f}" in overview.text
        # A total row: every team's hours and money, in the currency's digits.
        total = re.search(r'<tr id="teams-total">(.*?)</tr>', overview.text, re.S)
        assert total, "no total row"
        cells = re.findall(r'<td class="num">([^<]*)</td>', total.group(1))
        held = {Decimal("3.00"): "2.00", Decimal("8.00"): "4.00", Decimal("11.00"): "6.00"}
        assert cells[0] == held[alice + bob]  # GPU-hours (1 h costs 3.00 EUR, 2 h 8.00)
        assert cells[2] == f"{alice + bob:.2f}"
        assert cells[3] == f"{bob:.2f}"  # bob's hours were all idle-held

        page = await client.get("/w/stmt/statements", params={"month": month, "team": "vision"})
        assert page.status_code == 200, page.text
        assert "Statement · vision" in page.text
        assert A100 in page.text
        assert f"{alice:.2f} EUR" in page.text
        assert "no invoice" in page.text

        r = await client.get("/w/stmt/statements.csv", params={"month": month, "team": "vision"})
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(r.text)))
        assert [row["linuxUser"] for row in rows] == ["alice", "(total)"]
        assert rows[0]["gpuModel"] == A100
        assert Decimal(rows[0]["cost"]) == alice
        assert Decimal(rows[-1]["cost"]) == alice
        assert rows[0]["idleHeldCost"] == "0.00"
        assert {row["currency"] for row in rows} == {"EUR"}

        # Users without a team have a statement too; all of bob's money was idle-held.
        r = await client.get("/w/stmt/statements.csv", params={"month": month, "unassigned": "1"})
        rows = list(csv.DictReader(io.StringIO(r.text)))
        assert [row["linuxUser"] for row in rows] == ["bob", "(total)"]
        assert Decimal(rows[-1]["cost"]) == bob
        assert rows[-1]["idleHeldCost"] == rows[-1]["cost"]
        assert rows[0]["team"] == ""


async def test_statement_neutralizes_formulas_and_escapes_names(app, client) -> None:
    tenant = await make_tenant(app, "stmt")
    day = await build_fleet(client, tenant)
    await set_team(client, tenant, "alice", EVIL + "<script>")
    assert (await sign_in(client, "member@stmt.example")).status_code == 303
    month = (day + timedelta(hours=24)).strftime("%Y-%m")
    overview = await client.get("/w/stmt/statements", params={"month": month})
    assert overview.status_code == 200
    assert "<script>" not in overview.text
    r = await client.get(
        "/w/stmt/statements.csv", params={"month": month, "team": EVIL + "<script>"}
    )
    assert r.status_code == 200
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert rows[0]["team"] == "'" + EVIL + "<script>"
    assert 'filename="stmt-statement-' in r.headers["content-disposition"]


async def test_statement_bad_month_and_tenancy(app, client) -> None:
    await make_tenant(app, "stmt")
    await make_tenant(app, "other")
    # Not signed in: to the sign-in page.
    r = await client.get("/w/stmt/statements")
    assert r.status_code == 303
    assert r.headers["location"].startswith("/signin")
    assert (await sign_in(client, "admin@stmt.example")).status_code == 303
    for bad in ("2026-13", "November", "2026-11-01", "0000-01", "x" * 200):
        r = await client.get("/w/stmt/statements", params={"month": bad})
        assert r.status_code == 422, (bad, r.status_code)
    assert (
        await client.get("/w/stmt/statements.csv", params={"month": "2026-13"})
    ).status_code == 422
    # Empty month: a page that says so, and a CSV with only its total.
    r = await client.get("/w/stmt/statements", params={"month": "2026-01"})
    assert r.status_code == 200
    assert "Nobody held a GPU" in r.text
    # Another workspace's statements are not found.
    assert (await client.get("/w/other/statements")).status_code == 404
    assert (await client.get("/w/other/statements.csv")).status_code == 404


async def test_statement_months_in_other_digits_are_refused(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 200 for 2026-11: the month was matched with Unicode digits, as no other
    date parameter of the board is."""
    from tests.board.builders import make_tenant
    from tests.web.helpers import sign_in

    slug = f"months-{datetime.now(UTC):%H%M%S%f}"
    await make_tenant(app, slug)
    r = await sign_in(client, f"admin@{slug}.example", "correct-horse-battery")
    assert r.status_code == 303, r.text
    for path in ("statements", "statements.csv"):
        ok = await client.get(f"/w/{slug}/{path}", params={"month": "2026-11", "unassigned": "1"})
        assert ok.status_code == 200, ok.text[:300]
        for month in (
            "\u0662\u0660\u0662\u0666-\u0661\u0661",  # Arabic-Indic
            "\uff12\uff10\uff12\uff16-11",  # full-width
            "2026-\u0967\u0967",  # Devanagari
            "2026-11-01",
            "2026-13",
            "1999-12",
            "2026-1",
            "2026/11",
            "x" * 10_000,
        ):
            r = await client.get(f"/w/{slug}/{path}", params={"month": month, "unassigned": "1"})
            assert r.status_code == 422, (path, month, r.status_code, r.text[:300])
