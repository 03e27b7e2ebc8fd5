"""The reports' envelope on the wire: key order, times with the zone's offset (never "Z"),
the CSV file name from the window, and /docs showing the same fields in the same order."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx

from tests.board.builders import enroll, push
from tests.board.test_reports_builders import (
    days_ago_midnight,
    gpu,
    observation,
    proc,
    quick_tenant,
)

USAGE_KEYS = ["from", "to", "groupBy", "tz", "hourAlignment", "rows", "totals", "coverage"]
UTILIZATION_KEYS = ["from", "to", "groupBy", "bucket", "tz", "hourAlignment", "rows", "coverage"]
TOTALS_KEYS = [
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
]
COVERAGE_KEYS = ["earliestDataAt", "latestDataAt", "coveredGpuHours"]
ZONE = "America/New_York"


async def _fleet(app: Any, client: httpx.AsyncClient) -> Any:
    tenant = await quick_tenant(app, "wire")
    host = await enroll(client, tenant, "node-a")
    start = days_ago_midnight(2) + timedelta(hours=12)
    for minutes in (0, 1, 2):
        body = observation(
            start + timedelta(minutes=minutes),
            [gpu(0, util=70, state="active", procs=[proc("alice")], used=4000)],
        )
        r = await push(client, host["agentToken"], body)
        assert r.status_code == 202, r.text
    return tenant


def _local(text: str) -> datetime:
    """An ISO time as the reports write it: with the zone's offset, Python's spelling."""
    assert not text.endswith("Z"), text
    at = datetime.fromisoformat(text)
    assert at.utcoffset() in (timedelta(hours=-5), timedelta(hours=-4)), text
    return at


async def test_usage_envelope_keys_and_times(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await _fleet(app, client)
    query = {
        "from": days_ago_midnight(4).date().isoformat(),
        "to": days_ago_midnight(0).date().isoformat(),
        "groupBy": "host",
        "tz": ZONE,
    }
    url = f"/api/v1/workspaces/{tenant.slug}/reports/usage"
    r = await client.get(url, params=query, headers=tenant.auth("finance"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert list(body) == USAGE_KEYS
    assert list(body["totals"]) == TOTALS_KEYS
    assert list(body["coverage"]) == COVERAGE_KEYS
    assert (body["groupBy"], body["tz"]) == ("host", ZONE)
    assert _local(body["from"]).date().isoformat() == query["from"]
    assert _local(body["to"]).date().isoformat() == query["to"]
    assert _local(body["coverage"]["earliestDataAt"]) < _local(body["coverage"]["latestDataAt"])
    assert [list(row) for row in body["rows"]] == [
        ["hostId", "displayName", *TOTALS_KEYS[:4], "coveredGpuHours", *TOTALS_KEYS[4:]]
    ]

    csv = await client.get(url, params={**query, "format": "csv"}, headers=tenant.auth())
    assert csv.status_code == 200, csv.text
    name = f"{tenant.slug}-usage-{query['from']}-{query['to']}.csv"
    assert csv.headers["content-disposition"] == f'attachment; filename="{name}"'


async def test_utilization_envelope_keys(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await _fleet(app, client)
    query = {
        "from": days_ago_midnight(4).date().isoformat(),
        "to": days_ago_midnight(0).date().isoformat(),
        "groupBy": "gpu",
        "bucket": "day",
        "tz": ZONE,
    }
    url = f"/api/v1/workspaces/{tenant.slug}/reports/utilization"
    r = await client.get(url, params=query, headers=tenant.auth("member"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert list(body) == UTILIZATION_KEYS
    assert list(body["coverage"]) == COVERAGE_KEYS
    assert (body["groupBy"], body["bucket"], body["tz"]) == ("gpu", "day", ZONE)
    assert _local(body["from"]) < _local(body["to"])
    key_fields = ["hostId", "displayName", "gpuUuid", "gpuIndex", "gpuName", "bucketStart"]
    assert body["rows"]
    assert all(list(row)[:6] == key_fields for row in body["rows"])

    csv = await client.get(url, params={**query, "format": "csv"}, headers=tenant.auth())
    name = f"{tenant.slug}-utilization-{query['from']}-{query['to']}.csv"
    assert csv.headers["content-disposition"] == f'attachment; filename="{name}"'


async def test_docs_show_the_report_envelopes(app: Any) -> None:
    spec = app.openapi()
    schemas = spec["components"]["schemas"]
    for kind, model, keys in (
        ("usage", "UsageReportOut", USAGE_KEYS),
        ("utilization", "UtilizationReportOut", UTILIZATION_KEYS),
    ):
        answer = spec["paths"][f"/api/v1/workspaces/{{slug}}/reports/{kind}"]["get"]["responses"]
        content = answer["200"]["content"]
        assert content["application/json"]["schema"] == {"$ref": f"#/components/schemas/{model}"}
        assert "text/csv" in content
        assert list(schemas[model]["properties"]) == keys
    assert list(schemas["UsageTotals"]["properties"]) == TOTALS_KEYS
    assert list(schemas["ReportCoverage"]["properties"]) == COVERAGE_KEYS
