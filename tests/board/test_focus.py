"""The FOCUS 1.2 export, checked column by column against the specification.

The list below is FOCUS 1.2's Mandatory columns with their data types, written from the
specification's column pages (docs/money.md says where), independently of the code's.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from decimal import Decimal

from tests.board.money_builders import A100, H100, build_fleet, set_team
from tests.board.test_reports_builders import quick_tenant

SPEC_MANDATORY = {
    "BilledCost": "Decimal",
    "BillingAccountId": "String",
    "BillingAccountName": "String",
    "BillingCurrency": "String",
    "BillingPeriodEnd": "DateTime",
    "BillingPeriodStart": "DateTime",
    "ChargeCategory": "String",
    "ChargeClass": "String",
    "ChargeDescription": "String",
    "ChargePeriodEnd": "DateTime",
    "ChargePeriodStart": "DateTime",
    "ContractedCost": "Decimal",
    "EffectiveCost": "Decimal",
    "InvoiceIssuerName": "String",
    "ListCost": "Decimal",
    "PricingQuantity": "Decimal",
    "PricingUnit": "String",
    "ProviderName": "String",
    "PublisherName": "String",
    "ServiceCategory": "String",
    "ServiceName": "String",
}
# Columns that may be null (ChargeClass: only corrections carry a value; InvoiceId: only
# charges an invoice stands behind).
NULLABLE = {"ChargeClass", "InvoiceId"}
# FOCUS 1.2 columns beyond the mandatory ones that the export also fills.
SPEC_OTHER = {
    "BillingAccountType": "String",
    "ChargeFrequency": "String",
    "ConsumedQuantity": "Decimal",
    "ConsumedUnit": "String",
    "InvoiceId": "String",  # Recommended
    "PricingCategory": "String",
    "ServiceSubcategory": "String",
}
DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
DECIMAL = re.compile(r"^-?\d+(\.\d+)?$")
SERVICE_CATEGORIES = {"AI and Machine Learning", "Compute", "Other"}


async def _focus(client, tenant, role: str = "finance", **params: str):
    return await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/focus", params=params, headers=tenant.auth(role)
    )


async def test_focus_columns_types_and_figures(app, client) -> None:
    tenant = await quick_tenant(app, "focus")
    day = await build_fleet(client, tenant)
    await set_team(client, tenant, "alice", '=HYPERLINK("http://evil.example","x")')
    r = await _focus(
        client,
        tenant,
        **{"from": day.date().isoformat(), "to": (day + timedelta(days=3)).date().isoformat()},
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]
    table = list(csv.reader(io.StringIO(r.text)))
    header, rows = table[0], table[1:]
    assert len(header) == len(set(header))
    for column in (*SPEC_MANDATORY, *SPEC_OTHER):
        assert column in header, column
    # Every other column is one FOCUS defines or a custom one with the x_ prefix.
    for column in header:
        assert column in SPEC_MANDATORY or column in SPEC_OTHER or column.startswith("x_"), column
    for column in ("x_LinuxUser", "x_Team", "x_HostName", "x_GpuModel"):
        assert column in header
    assert "x_ActiveGpuHours" in header
    assert "x_IdleHeldGpuHours" in header

    records = [dict(zip(header, row, strict=True)) for row in rows]
    assert records
    for record in records:
        for column, kind in {**SPEC_MANDATORY, **SPEC_OTHER}.items():
            value = record[column]
            if value == "":
                assert column in NULLABLE, column
                continue
            if kind == "DateTime":
                assert DATETIME.match(value), (column, value)
            elif kind == "Decimal":
                assert DECIMAL.match(value), (column, value)
        assert record["ChargeClass"] == ""
        # No invoice or issued statement stands behind the board's costs.
        assert record["InvoiceId"] == ""
        assert record["ChargeCategory"] == "Usage"
        assert record["PricingUnit"] == record["ConsumedUnit"] == "GPU-Hours"
        assert record["PricingQuantity"] == record["ConsumedQuantity"]
        assert record["ServiceCategory"] in SERVICE_CATEGORIES
        assert record["BillingCurrency"] == "EUR"
        # No invoice behind the costs: every cost column is the same priced figure.
        assert (
            record["BilledCost"]
            == record["EffectiveCost"]
            == record["ListCost"]
            == record["ContractedCost"]
        )
        held = Decimal(record["PricingQuantity"])
        split = Decimal(record["x_ActiveGpuHours"]) + Decimal(record["x_IdleHeldGpuHours"])
        assert held == split
        assert record["x_HostName"] == "node-a"

    # Days are cut in the workspace's zone (Africa/Lagos, UTC+1): the Lagos day d begins
    # at 23:00 UTC the day before. One row per team, user, GPU model and day.
    d0 = day.date()
    lagos = {
        d0: ((day - timedelta(hours=1)), (day + timedelta(hours=23))),
        d0 + timedelta(days=1): ((day + timedelta(hours=23)), (day + timedelta(hours=47))),
    }
    got = {
        (rec["x_Team"], rec["x_LinuxUser"], rec["x_GpuModel"], rec["ChargePeriodStart"]): (
            rec["PricingQuantity"],
            rec["BilledCost"],
        )
        for rec in records
    }
    stamp = {k: v[0].strftime("%Y-%m-%dT%H:%M:%SZ") for k, v in lagos.items()}
    team = '\'=HYPERLINK("http://evil.example","x")'  # shown as text, never a formula
    assert got == {
        (team, "alice", A100, stamp[d0]): ("1.000000", "2.00"),
        (team, "alice", A100, stamp[d0 + timedelta(days=1)]): ("2.000000", "6.00"),
        ("", "bob", H100, stamp[d0]): ("1.000000", "1.00"),
        ("", "bob", H100, stamp[d0 + timedelta(days=1)]): ("2.000000", "2.00"),
    }
    assert len(records) == 4
    for rec in records:
        start = rec["ChargePeriodStart"]
        period = next(v for k, v in lagos.items() if stamp[k] == start)
        assert rec["ChargePeriodEnd"] == period[1].strftime("%Y-%m-%dT%H:%M:%SZ")
        assert rec["BillingPeriodStart"] <= start < rec["BillingPeriodEnd"]
        assert rec["BillingPeriodStart"].endswith("T23:00:00Z")  # a Lagos month's midnight
        assert rec["BillingAccountId"] == tenant.slug
    assert sum(Decimal(rec["BilledCost"]) for rec in records) == Decimal("11.00")


async def test_focus_refuses_what_it_cannot_export(app, client) -> None:
    tenant = await quick_tenant(app, "focus")
    window = {"from": "2026-11-01", "to": "2026-12-01"}
    # No prices yet: no currency, so no row can be written; the header alone.
    r = await _focus(client, tenant, **window)
    assert r.status_code == 200, r.text
    assert r.text.splitlines() == [r.text.splitlines()[0]]
    assert r.text.startswith("BilledCost,")
    for bad in (
        {"from": "yesterday", "to": "2026-12-01"},
        {"to": "2026-12-01"},
        {**window, "tz": "Mars/Base"},
    ):
        r = await _focus(client, tenant, **bad)
        assert r.status_code == 422, r.text
        assert isinstance(r.json()["detail"], str)
    # Every role may read the export.
    for role in ("admin", "member", "finance"):
        assert (await _focus(client, tenant, role, **window)).status_code == 200
    assert (await client.get(f"/api/v1/workspaces/{tenant.slug}/reports/focus")).status_code == 401
