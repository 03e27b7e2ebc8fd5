"""A GPU whose reported name changes: the board shows its name now, and keeps the names
it had before (gpu_name_history), by which its past hours are priced; a late point
(a spool replayed, an archive back-filled) changes no GPU."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.board.builders import enroll, example, make_tenant, minutes_ago, push, retimed
from tests.board.db import rows, scalar
from tests.board.money_builders import H100, fixture_day, prices_body, two_models
from tests.board.test_reports_builders import quick_tenant, report


def _named(at_minutes_ago: float, name: str) -> dict[str, Any]:
    body = retimed(example("observation-1.8.0-fake.json"), minutes_ago(at_minutes_ago))
    body["gpus"][0]["name"] = name
    return body


async def _push(client: Any, host: dict[str, Any], body: dict[str, Any]) -> None:
    r = await push(client, host["agentToken"], body)
    assert r.status_code == 202, r.text


async def _names(app: Any) -> tuple[str, list[tuple[Any, ...]]]:
    uuid = example("observation-1.8.0-fake.json")["gpus"][0]["uuid"]
    now = await scalar(app, "SELECT name FROM gpus WHERE uuid = %s", uuid)
    history = await rows(
        app,
        "SELECT h.name, h.since, h.until FROM gpu_name_history h "
        "JOIN gpus g ON g.workspace_id = h.workspace_id AND g.id = h.gpu_id "
        "WHERE g.uuid = %s ORDER BY h.until",
        uuid,
    )
    return str(now), history


async def test_a_rename_keeps_the_old_name_for_the_time_before_it(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    first, second = _named(30, "NVIDIA A100"), _named(20, "NVIDIA A100 80GB")
    third = _named(10, "NVIDIA A100-SXM4-80GB")
    for body in (first, second, third):
        await _push(client, host, body)
    now, history = await _names(app)
    assert now == "NVIDIA A100-SXM4-80GB"
    assert [h[0] for h in history] == ["NVIDIA A100", "NVIDIA A100 80GB"]
    # Each name holds from where the one before it ended to the first push without it.
    assert history[0][1] == datetime(2000, 1, 1, tzinfo=UTC)
    assert history[0][2] == datetime.fromisoformat(second["observedAt"])
    assert history[1][1] == history[0][2]
    assert history[1][2] == datetime.fromisoformat(third["observedAt"])


async def test_a_late_point_with_the_old_name_changes_no_gpu(app: Any, client: Any) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    await _push(client, host, _named(30, "NVIDIA A100"))
    await _push(client, host, _named(10, "NVIDIA H100"))
    await _push(client, host, _named(20, "NVIDIA A100"))  # a replayed, older snapshot
    now, history = await _names(app)
    assert now == "NVIDIA H100"
    assert [h[0] for h in history] == ["NVIDIA A100"]


async def test_a_renamed_gpu_does_not_reprice_its_past_hours(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was: the cost of an hour already past followed the GPU's *current* name (cost
    joined each rollup row to `gpus.name`, which every push overwrote), so when an agent
    reported a card under another name (a driver update that spells the model differently,
    or a stolen agent token renaming its host's cards) every past hour of that GPU was
    priced again at the new name's price: a closed statement, the FOCUS file and last
    week's usage report changed after they were downloaded. Now each hour is priced by the
    name its GPU had then (gpu_name_history)."""
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
