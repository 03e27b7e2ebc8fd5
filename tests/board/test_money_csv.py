"""Money in the board/money CSV files (the FOCUS export, team statements) is written with
its currency's minor unit, never as 19.220000: yen without decimals, rounded half to
even per row; a statement's total is rounded once from the exact figures, so it may
differ from the sum of its rounded lines by up to half a yen per line (docs/money.md)."""

from __future__ import annotations

import csv
import io
from datetime import date, timedelta
from typing import Any

from board.money import statements
from board.reportkit.params import parse_window
from board.runtime import Runtime
from tests.board.db import scalar
from tests.board.money_builders import A100, H100, build_fleet, fixture_day, set_team
from tests.board.test_reports_builders import quick_tenant

ZONE = "Africa/Lagos"  # build_fleet's


def yen_prices(d: date) -> dict[str, Any]:
    """build_fleet's price list in yen at half-yen prices, so that rows land on .5."""
    return {
        "currency": "JPY",
        "prices": [
            {"gpuModel": "*", "perGpuHour": "0.5", "from": (d - timedelta(days=10)).isoformat()},
            {"gpuModel": A100, "perGpuHour": "100.5", "from": (d - timedelta(days=10)).isoformat()},
            {"gpuModel": A100, "perGpuHour": "101.25", "from": (d + timedelta(days=1)).isoformat()},
        ],
    }


async def test_focus_writes_yen_without_decimals_rounded_half_to_even(app, client) -> None:
    tenant = await quick_tenant(app, "yen")
    day = await build_fleet(client, tenant, yen_prices(fixture_day().date()))
    d0, d1 = day.date(), day.date() + timedelta(days=1)
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/focus",
        params={"from": d0.isoformat(), "to": (d0 + timedelta(days=3)).isoformat()},
        headers=tenant.auth("finance"),
    )
    assert r.status_code == 200, r.text
    records = list(csv.DictReader(io.StringIO(r.text)))
    starts = {d0: (day - timedelta(hours=1)), d1: (day + timedelta(hours=23))}
    stamp = {k: v.strftime("%Y-%m-%dT%H:%M:%SZ") for k, v in starts.items()}
    got = {
        (rec["x_LinuxUser"], rec["ChargePeriodStart"]): (rec["BilledCost"], rec["BillingCurrency"])
        for rec in records
    }
    # alice: 1 h × 100.5 and 2 h × 101.25; bob: 1 h and 2 h × 0.5. Halves go to even.
    assert got == {
        ("alice", stamp[d0]): ("100", "JPY"),
        ("alice", stamp[d1]): ("202", "JPY"),
        ("bob", stamp[d0]): ("0", "JPY"),
        ("bob", stamp[d1]): ("1", "JPY"),
    }
    for rec in records:
        for column in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost"):
            assert rec[column] == rec["BilledCost"], column


async def test_statement_csv_writes_yen_and_totals_from_exact_figures(app, client) -> None:
    tenant = await quick_tenant(app, "yen")
    day = await build_fleet(client, tenant, yen_prices(fixture_day().date()))
    await set_team(client, tenant, "alice", "vision")
    await set_team(client, tenant, "bob", "vision")
    workspace_id = await scalar(app, "SELECT id FROM workspaces WHERE slug = %s", tenant.slug)
    d0 = day.date()
    # Any window will do for the figures; a month's is only where the page cuts them.
    window = parse_window(
        (d0 - timedelta(days=1)).isoformat(), (d0 + timedelta(days=3)).isoformat(), ZONE
    )
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        currency, teams = await statements.month_figures(conn, workspace_id, window)
    found = statements.statement(tenant.slug, d0.replace(day=1), ZONE, "vision", teams, currency)
    rows = list(csv.DictReader(io.StringIO(statements.statement_csv(found))))
    got = {
        (row["linuxUser"], row["gpuModel"]): (row["cost"], row["idleHeldCost"], row["currency"])
        for row in rows
    }
    assert got == {
        # 303.0 exactly; 1.5 idle-held, rounded to the even 2.
        ("alice", A100): ("303", "0", "JPY"),
        ("bob", H100): ("2", "2", "JPY"),
        # The exact 304.5 rounded once (to the even 304), not 303 + 2 = 305.
        ("(total)", ""): ("304", "2", "JPY"),
    }
    # The hours keep their six decimals: only money is written in minor units.
    assert rows[0]["heldGpuHours"] == "3.000000"
