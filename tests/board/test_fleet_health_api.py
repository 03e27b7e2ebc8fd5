"""Fleet health through the API: maintenance windows (made, listed, removed, refused,
audited), retiring a missing GPU, the hot threshold setting, and `gua_board_gpus{health}`."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.board.answers import audit_rows, refused
from tests.board.builders import Tenant, enroll, make_tenant, push
from tests.board.db import rows
from tests.board.test_reports_builders import gpu, observation
from tests.ops.fleet import sample_value


def card(index: int, temperature: int = 40) -> dict[str, Any]:
    body = gpu(index)
    body["temperatureC"] = temperature
    return body


async def windows_url(client: httpx.AsyncClient, tenant: Tenant) -> tuple[str, str]:
    host = await enroll(client, tenant, "node-a")
    return host["hostId"], f"/api/v1/workspaces/{tenant.slug}/hosts/{host['hostId']}/maintenance"


async def test_maintenance_windows(app, client) -> None:
    acme = await make_tenant(app, "acme")
    host_id, url = await windows_url(client, acme)
    now = datetime.now(UTC).replace(microsecond=0)
    body = {
        "start": (now - timedelta(hours=1)).isoformat(),
        "end": (now + timedelta(hours=1)).isoformat(),
        "note": "new fans",
    }
    before = await audit_rows(app, "acme")
    made = await client.post(url, json=body, headers=acme.auth())
    assert made.status_code == 201, made.text
    window = made.json()
    assert window["hostId"] == host_id
    assert window["recurrence"] == "none"
    assert window["zone"] == "UTC"
    assert window["note"] == "new fans"
    assert window["inForce"] is True
    assert window["nextStart"] == window["start"]
    weekly = await client.post(
        url,
        json={
            "start": "2030-01-07T22:00:00Z",
            "end": "2030-01-08T02:00:00Z",
            "recurrence": "weekly",
        },
        headers=acme.auth(),
    )
    assert weekly.status_code == 201, weekly.text
    assert weekly.json()["inForce"] is False
    assert weekly.json()["nextStart"] == "2030-01-07T22:00:00+00:00"

    listed = await client.get(url, headers=acme.auth("finance"))
    assert listed.status_code == 200
    assert [w["windowId"] for w in listed.json()["windows"]] == [
        window["windowId"],
        weekly.json()["windowId"],
    ]
    gone = await client.delete(f"{url}/{window['windowId']}", headers=acme.auth())
    assert gone.status_code == 204
    refused(await client.delete(f"{url}/{window['windowId']}", headers=acme.auth()), 404)
    refused(await client.delete(f"{url}/not-an-id", headers=acme.auth()), 404)
    actions = await rows(
        app, "SELECT action FROM audit_events WHERE action LIKE 'maintenance.%%' ORDER BY id"
    )
    assert [a for (a,) in actions] == [
        "maintenance.planned",
        "maintenance.planned",
        "maintenance.removed",
    ]
    assert await audit_rows(app, "acme") == before + 3

    # Who may: members read, only admins change; another workspace's host is not found.
    refused(await client.post(url, json=body, headers=acme.auth("member")), 403)
    other = await make_tenant(app, "other")
    refused(await client.get(url, headers=other.auth()), 404)
    foreign = url.replace("/acme/", "/other/")
    refused(await client.post(foreign, json=body, headers=other.auth()), 404)
    refused(await client.get(foreign, headers=other.auth()), 404)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"start": "2030-01-01T10:00:00Z", "end": "2030-01-01T10:00:00Z"}, "must be after start"),
        ({"start": "2030-01-01T10:00:00", "end": "2030-01-01T11:00:00Z"}, "has no UTC offset"),
        (
            {"start": "2030-01-01T10:00:00Z", "end": "2030-01-02T10:00:00Z", "recurrence": "daily"},
            "shorter than a day",
        ),
        (
            {"start": "2030-01-01T10:00Z", "end": "2030-01-09T10:00Z", "recurrence": "weekly"},
            "shorter than a week",
        ),
        (
            {
                "start": "2030-01-01T10:00Z",
                "end": "2030-01-01T11:00Z",
                "until": "2030-02-01T00:00Z",
            },
            "until goes with a recurring window",
        ),
        (
            {
                "start": "2030-01-01T10:00Z",
                "end": "2030-01-01T11:00Z",
                "recurrence": "daily",
                "until": "2029-01-01T00:00Z",
            },
            "until must be after start",
        ),
        ({"start": "2030-01-01T10:00Z", "end": "2031-06-01T11:00Z"}, "at most 366 days"),
        ({"start": "2030-01-01T10:00Z", "end": "2030-01-01T11:00Z", "recurrence": "monthly"}, ""),
        ({"start": "2030-01-01T10:00Z", "end": "2030-01-01T11:00Z", "note": "a\nb"}, "line breaks"),
        ({"start": "2030-01-01T10:00Z"}, "end"),
        ({"start": "1900-01-01T10:00Z", "end": "1900-01-01T11:00Z"}, "between 1970 and 9000"),
    ],
)
async def test_a_refused_window_is_a_sentence(app, client, body, words) -> None:
    acme = await make_tenant(app, "acme")
    _, url = await windows_url(client, acme)
    before = await audit_rows(app, "acme")
    detail = refused(await client.post(url, json=body, headers=acme.auth()), 422)
    assert words in detail, detail
    assert await audit_rows(app, "acme") == before


async def test_the_hot_threshold_is_a_setting(app, client) -> None:
    acme = await make_tenant(app, "acme")
    url = "/api/v1/workspaces/acme/settings"
    assert (await client.get(url, headers=acme.auth("finance"))).json()["hotTemperatureC"] == 85
    for bad in (29, 121, "90", None):
        detail = refused(
            await client.patch(url, json={"hotTemperatureC": bad}, headers=acme.auth())
        )
        assert "hotTemperatureC" in detail or "null" in detail, detail
    r = await client.patch(url, json={"hotTemperatureC": 80}, headers=acme.auth())
    assert r.json()["hotTemperatureC"] == 80


async def gauge(client: httpx.AsyncClient, wanted: dict[str, float]) -> dict[str, float]:
    """gua_board_gpus by health, scraped until it reads `wanted` (each process keeps its
    counts a few seconds): a generous deadline, no timing asserted."""
    deadline = time.monotonic() + 60
    while True:
        text = (await client.get("/metrics")).text
        found = {
            h: sample_value(text, "gua_board_gpus", f'health="{h}"')
            for h in ("ok", "hot", "missing", "not_observed")
        }
        if found == wanted or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.5)


async def test_retiring_a_missing_gpu_and_the_health_gauge(app, client) -> None:
    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme, "node-a")
    stale = await enroll(client, acme, "node-s")
    now = datetime.now(UTC)
    agent = host["agentToken"]
    # GPU-1 listed 4 minutes ago, absent since; GPU-2 is hot; node-s is stale with 2 GPUs.
    await push(client, agent, observation(now - timedelta(minutes=4), [card(0), card(1), card(2)]))
    for minutes in (3, 2, 1, 0):
        at = now - timedelta(minutes=minutes, seconds=1)
        r = await push(client, agent, observation(at, [card(0), card(2, temperature=91)]))
        assert r.status_code == 202, r.text
    old = now - timedelta(hours=2)
    await push(client, stale["agentToken"], observation(old, [card(0), card(1)]))
    wanted = {"ok": 1.0, "hot": 1.0, "missing": 1.0, "not_observed": 2.0}
    assert await gauge(client, wanted) == wanted

    url = f"/api/v1/workspaces/acme/hosts/{host['hostId']}/gpus"
    detail = refused(await client.post(f"{url}/GPU-0/retire", headers=acme.auth()), 409)
    assert "newest observation" in detail
    refused(await client.post(f"{url}/GPU-9/retire", headers=acme.auth()), 404)
    refused(await client.post(f"{url}/GPU-1/retire", headers=acme.auth("member")), 403)
    other = await make_tenant(app, "other")
    foreign = f"/api/v1/workspaces/other/hosts/{host['hostId']}/gpus/GPU-1/retire"
    refused(await client.post(foreign, headers=other.auth()), 404)
    retired = await client.post(f"{url}/GPU-1/retire", headers=acme.auth())
    assert retired.status_code == 200, retired.text
    assert retired.json()["uuid"] == "GPU-1"
    assert retired.json()["index"] == 1
    (entry,) = await rows(
        app, "SELECT action, target FROM audit_events WHERE action = 'gpu.retired'"
    )
    assert entry == ("gpu.retired", f"{host['hostId']} GPU 1")
    wanted["missing"] = 0.0
    assert await gauge(client, wanted) == wanted

    # Seen again after its retirement, it counts as any other GPU.
    r = await push(client, agent, observation(datetime.now(UTC), [card(0), card(1), card(2, 91)]))
    assert r.status_code == 202, r.text
    wanted["ok"] = 2.0
    assert await gauge(client, wanted) == wanted
    text = (await client.get("/metrics")).text
    assert "acme" not in text  # no tenant in a label
