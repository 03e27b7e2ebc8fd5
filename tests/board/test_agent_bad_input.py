"""Bad input gets a clear string detail and changes nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.board.db import scalar
from tests.board.helpers import enroll, example, make_tenant, retimed


def _body(**changes: Any) -> dict[str, Any]:
    body = retimed(example("observation-1.8.0-fake.json"))
    for path, value in changes.items():
        target: Any = body
        *parents, leaf = path.split("__")
        for p in parents:
            target = target[int(p)] if p.isdigit() else target[p]
        if value is _DELETE:
            del target[leaf]
        else:
            target[leaf] = value
    return body


_DELETE = object()
NOW = datetime.now(UTC)

BAD_BODIES = {
    "wrong type": (_body(gpus__0__utilPct="80"), 422, "utilPct"),
    "float for int": (_body(gpus__0__memoryUsedMb=1.5), 422, "memoryUsedMb"),
    "bool for int": (_body(gpus__0__index=True), 422, "index"),
    "unknown top-level field": (_body(extra=1), 422, "extra"),
    "unknown nested field": (_body(gpus__0__processes__0__cmdline="python x"), 422, "cmdline"),
    "wrong schemaVersion": (_body(schemaVersion="availability.snapshot.v2"), 422, "schemaVersion"),
    "utilPct 101": (_body(gpus__0__utilPct=101), 422, "utilPct"),
    "used above total": (_body(gpus__2__memoryUsedMb=50000), 422, "memoryUsedMb"),
    "partial without errors": (_body(collectionStatus="partial"), 422, "errors"),
    "ok with errors": (_body(errors=["process_list_unavailable"]), 422, "errors"),
    "unknown status": (_body(collectionStatus="fine"), 422, "collectionStatus"),
    "missing host": (_body(host=_DELETE), 422, "host"),
    "timestamp without offset": (_body(observedAt="2026-12-02T17:42:36.516146"), 422, "offset"),
    "not a timestamp": (_body(observedAt="yesterday"), 422, "observedAt"),
    "far in the future": (
        _body(observedAt=(NOW + timedelta(minutes=10)).isoformat()),
        422,
        "ahead",
    ),
    "older than retention": (
        _body(observedAt=(NOW - timedelta(days=40)).isoformat()),
        422,
        "retention",
    ),
    "negative pid": (_body(gpus__0__processes__0__pid=0), 422, "pid"),
    "empty uuid": (_body(gpus__0__uuid=""), 422, "uuid"),
    "string too long": (_body(host__hostname="h" * 300), 422, "hostname"),
    "duplicate gpu uuid": (_body(gpus__1__uuid="GPU-0"), 422, "unique"),
    "too many gpus": (
        _body(
            gpus=[
                dict(example("observation-1.8.0-fake.json")["gpus"][2], uuid=f"G{i}", index=i)
                for i in range(65)
            ]
        ),
        422,
        "gpus",
    ),
    "gpus not a list": (_body(gpus={}), 422, "gpus"),
    # PostgreSQL text cannot hold NUL: refused up front, not a failed write.
    "NUL in a process name": (_body(gpus__0__processes__0__name="py\u0000thon"), 422, "NUL"),
    "NUL in the hostname": (_body(host__hostname="vm\u0000"), 422, "hostname"),
    "temperature beyond smallint": (_body(gpus__0__temperatureC=40000), 422, "temperatureC"),
    # Error codes are joined by \x1f on their way to PostgreSQL: one would become two.
    "unit separator in an error code": (
        _body(collectionStatus="partial", errors=["process_list\u001funavailable"]),
        422,
        "errors.0",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
async def test_bad_snapshot_changes_nothing(app, client, case: str) -> None:
    body, status, mention = BAD_BODIES[case]
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    r = await client.post(
        "/agent/v1/observations",
        content=json.dumps(body),
        headers={
            "Authorization": f"Bearer {host['agentToken']}",
            "Content-Type": "application/json",
        },
    )
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str)
    assert detail
    assert mention.lower() in detail.lower()
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 0
    assert await scalar(app, "SELECT count(*) FROM gpu_samples") == 0
    assert await scalar(app, "SELECT count(*) FROM gpu_hour_rollups") == 0
    shown = (
        await client.get(f"/api/v1/workspaces/acme/hosts/{host['hostId']}", headers=tenant.auth())
    ).json()
    assert shown["freshness"] == "never"
    assert sum(p["count"] for p in shown["rejectedPushes"]) == 1
    assert shown["rejectedPushes"][0]["lastDetail"] == detail


async def test_malformed_json(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    r = await client.post(
        "/agent/v1/observations",
        content=b'{"schemaVersion": ',
        headers={"Authorization": f"Bearer {host['agentToken']}"},
    )
    assert r.status_code == 400
    assert r.json()["detail"] == "Request body is not valid JSON."
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 0
    assert await scalar(app, "SELECT reason FROM host_rejections") == "invalid_json"


async def test_oversized_body_is_refused_before_parsing(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    huge = b"{" + b" " * (1024 * 1024 + 1) + b"}"
    r = await client.post(
        "/agent/v1/observations",
        content=huge,
        headers={"Authorization": f"Bearer {host['agentToken']}"},
    )
    assert r.status_code == 413
    assert isinstance(r.json()["detail"], str)

    async def chunks():  # no Content-Length: the limit applies while streaming
        for _ in range(20):
            yield b" " * 65536

    r = await client.post(
        "/agent/v1/observations",
        content=chunks(),
        headers={"Authorization": f"Bearer {host['agentToken']}"},
    )
    assert r.status_code == 413
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 0
    assert await scalar(app, "SELECT sum(count) FROM host_rejections") == 2


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer gua_agent_nope_nope", "Basic abc", "Bearer gua_pat_x"],
)
async def test_missing_or_wrong_agent_token(app, client, authorization) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    r = await client.post(
        "/agent/v1/observations",
        json=retimed(example("observation-1.8.0-fake.json")),
        headers=headers,
    )
    assert r.status_code == 401
    assert isinstance(r.json()["detail"], str)
    if authorization:
        assert authorization.split(" ")[-1] not in r.json()["detail"]
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 0


async def test_pat_is_not_an_agent_token(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    r = await client.post(
        "/agent/v1/observations",
        json=retimed(example("observation-1.8.0-fake.json")),
        headers=tenant.auth(),
    )
    assert r.status_code == 401
