"""The hosts API and the fleet/host JSON keep their exact shape: keys, order, nulls.

A populated workspace (a busy host, a partial one, an error heartbeat, a stale one, one
never seen, a rejected push, a revoked host) is read as each role; volatile values (ids,
times, token prefixes) become placeholders and the rest is compared as text with the JSON
the board answered before its read models were typed (examples/hosts-json-shapes.json),
so a key renamed, reordered or dropped, or a null turned into a missing key, fails.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from tests.board.builders import (
    LOCAL_EXAMPLES,
    enroll,
    example,
    make_tenant,
    minutes_ago,
    push,
    retimed,
)
from tests.web.helpers import sign_in

EXPECTED = json.loads((LOCAL_EXAMPLES / "hosts-json-shapes.json").read_text())
TIMES = {
    "lastSeenAt",
    "lastReceivedAt",
    "enrolledAt",
    "revokedAt",
    "lastAt",
    "generatedAt",
    "stateSince",
}
VOLATILE = TIMES | {"hostId", "tokenPrefix"}
# Python's isoformat in UTC, as the API has always written times (never a "Z").
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00")


def _placeholders(value: Any) -> Any:
    if isinstance(value, dict):
        shown = {}
        for k, v in value.items():
            if k in TIMES and v is not None:
                assert ISO_UTC.fullmatch(v), (k, v)
                datetime.fromisoformat(v)
            shown[k] = f"<{k}>" if k in VOLATILE and v is not None else _placeholders(v)
        return shown
    if isinstance(value, list):
        return [_placeholders(v) for v in value]
    return value


def _shape(body: Any) -> str:
    """The body as ordered JSON text with volatile values replaced."""
    return json.dumps(_placeholders(body), indent=1)


def _compare(shapes: dict[str, Any]) -> None:
    for name, body in shapes.items():
        assert _shape(body) == json.dumps(EXPECTED[name], indent=1), name


async def _populated(app: Any, client: Any) -> Any:
    tenant = await make_tenant(app, "acme")
    busy = await enroll(client, tenant, "a-busy")
    body = retimed(example("observation-1.8.0-fake.json"))
    body["gpus"][1]["processes"][1]["memoryUsedMb"] = None
    assert (await push(client, busy["agentToken"], body)).status_code == 202
    rejected = retimed(example("observation-1.8.0-fake.json"))
    rejected["gpus"][0]["utilPct"] = 101
    assert (await push(client, busy["agentToken"], rejected)).status_code == 422

    partial = await enroll(client, tenant, "b-partial")
    body = retimed(example("observation-1.8.0-fake.json"))
    body["collectionStatus"] = "partial"
    body["errors"] = ["process_list_unavailable"]
    del body["gpus"][1]["usageState"]
    body["gpus"][1]["processes"] = []
    assert (await push(client, partial["agentToken"], body)).status_code == 202

    error = await enroll(client, tenant, "c-error")
    heartbeat = retimed(example("observation-1.3.0-error-heartbeat.json"))
    assert (await push(client, error["agentToken"], heartbeat)).status_code == 202

    stale = await enroll(client, tenant, "d-stale")
    old = retimed(example("observation-1.3.0-fake.json"), minutes_ago(10))
    assert (await push(client, stale["agentToken"], old)).status_code == 202

    await enroll(client, tenant, "e-never")
    revoked = await enroll(client, tenant, "f-revoked")
    r = await client.post(
        f"/api/v1/workspaces/acme/hosts/{revoked['hostId']}/revoke", headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    return tenant, busy, revoked


async def test_hosts_api_shape(app, client) -> None:
    tenant, busy, revoked = await _populated(app, client)
    shapes = {}
    for role in ("admin", "member", "finance"):
        listed = await client.get("/api/v1/workspaces/acme/hosts", headers=tenant.auth(role))
        assert listed.status_code == 200, listed.text
        shapes[f"list-{role}"] = listed.json()
        for name, host in (("busy", busy), ("revoked", revoked)):
            one = await client.get(
                f"/api/v1/workspaces/acme/hosts/{host['hostId']}", headers=tenant.auth(role)
            )
            assert one.status_code == 200, one.text
            shapes[f"{name}-{role}"] = one.json()
    revoke = await client.post(
        f"/api/v1/workspaces/acme/hosts/{busy['hostId']}/revoke", headers=tenant.auth()
    )
    assert revoke.status_code == 200, revoke.text
    shapes["revoke"] = revoke.json()
    _compare(shapes)


async def test_fleet_and_host_page_json_shape(app, client) -> None:
    _, busy, _ = await _populated(app, client)
    shapes = {}
    for role in ("member", "finance"):
        client.cookies.clear()
        await sign_in(client, f"{role}@acme.example")
        fleet = (await client.get("/w/acme/fleet.json")).json()
        assert set(fleet["fragments"]) == {"counts", "hosts"}
        # The fragments are HTML, checked by the page tests.
        shapes[f"fleet-{role}"] = fleet | {"fragments": None}
        host = (await client.get(f"/w/acme/hosts/{busy['hostId']}.json")).json()
        assert set(host["fragments"]) == {"summary", "gpus", "processes", "problems"}
        shapes[f"host-{role}"] = host | {"fragments": None}
    _compare(shapes)
