"""Round 14 of the hunt: conditional requests, the calendar feed, and money.

- Was: the cost of an hour already past followed the GPU's *current* name. Cost
  joined each rollup row to `gpus.name`, and every push overwrote that name
  (board/ingest/gpuids.py). So when an agent reported a card under another name (a
  driver update that spells the model differently, or a host whose stolen agent token
  renames its own cards), every past hour of that GPU was priced again at the new
  name's price: a closed statement, the FOCUS file and the usage report for last week
  changed after they were downloaded. Now each hour is priced by the name its GPU had
  then (gpu_name_history).

Attacks that held (no test): fleet.json's ETag after a push, a booking, a cancel, a
role change and a removal (the fingerprint names every drawn value, the role and the
slug), another workspace's or role's ETag, `If-None-Match: *`, weak and listed ETags;
gzip and identity answers both carry `Vary: Accept-Encoding` and `no-store` (the same
strong ETag for both codings, harmless while nothing may store them); the feed with
lone CRs, bidi and 4-byte characters in notes and host names (icalendar escapes and
folds them on character boundaries), a database whose session zone is not UTC (the
feed still writes UTC times); usage report, team statements and the FOCUS file over a
DST month in America/New_York with prices changing at local midnights, shared GPUs and
day rollups refreshed or not: team totals agree to the cent (FOCUS rows differ only by
the documented per-row rounding).

In process (the app and a real PostgreSQL).
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.board.builders import enroll, push
from tests.board.money_builders import H100, fixture_day, prices_body, two_models
from tests.board.test_reports_builders import quick_tenant, report


async def test_a_renamed_gpu_does_not_reprice_its_past_hours(
    app: Any, client: httpx.AsyncClient
) -> None:
    # money_builders' fleet: GPU-0 an "NVIDIA A100" held by alice 3 h (2.00, then 3.00
    # per GPU-hour), GPU-1 an "NVIDIA H100" held by bob 3 h at the "*" price 1.00.
    tenant = await quick_tenant(app, "rename")
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings",
        json={
            "maxSampleGapSeconds": 86400,
            "maxSampleGapFrom": "2000-01-01T00:00:00Z",  # before the history pushed
            "timezone": "Africa/Lagos",
        },
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    day = fixture_day()
    host = await enroll(client, tenant, "node-a")
    for hours in (22, 24, 25):
        r = await push(client, host["agentToken"], two_models(day + timedelta(hours=hours)))
        assert r.status_code == 202, r.text
    r = await client.put(
        f"/api/v1/workspaces/{tenant.slug}/prices",
        json=prices_body(day.date()),
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    window = {"from": day.date().isoformat(), "to": (day + timedelta(days=2)).date().isoformat()}

    async def figures() -> tuple[dict[str, float], float, list[tuple[str, str, str]]]:
        usage = await report(client, tenant, "usage", groupBy="user", tz="UTC", **window)
        focus = await client.get(
            f"/api/v1/workspaces/{tenant.slug}/reports/focus",
            params={**window, "tz": "UTC"},
            headers=tenant.auth("finance"),
        )
        assert focus.status_code == 200, focus.text
        lines = [
            (row["x_LinuxUser"], row["x_GpuModel"], row["BilledCost"])
            for row in csv.DictReader(io.StringIO(focus.text))
        ]
        by_user = {row["user"]: row["cost"] for row in usage["rows"]}
        return by_user, usage["totals"]["cost"], sorted(lines)

    before = await figures()
    assert before[0] == {"alice": 8.0, "bob": 3.0}, before
    # Days later the agent reports GPU-0 (same UUID) under another model's name. The new
    # observation is more than maxSampleGap after the last one: it credits nothing.
    renamed = two_models(datetime.now(UTC) - timedelta(minutes=1))
    renamed["gpus"][0]["name"] = H100
    r = await push(client, host["agentToken"], renamed)
    assert r.status_code == 202, r.text
    after = await figures()
    assert after == before, (
        "the past hours of a GPU were priced again under the name it reports now: "
        f"{before} -> {after}"
    )
