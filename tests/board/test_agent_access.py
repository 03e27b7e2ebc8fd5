"""One door for every agent route: token → host → not revoked (board/ingest/access.py)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from websockets.exceptions import InvalidStatus

from board.auth import tokens
from board.runtime import Runtime
from tests.board.builders import enroll, example, make_tenant, retimed
from tests.board.db import execute
from tests.board.test_host_revocation import refuses_token, serve
from tests.board.test_stream import agent_socket


def _agent_calls(token: str) -> list[tuple[str, str, dict[str, Any]]]:
    auth = {"Authorization": f"Bearer {token}"}
    body = json.dumps(retimed(example("observation-1.8.0-fake.json")))
    return [
        (
            "POST",
            "/agent/v1/observations",
            {"content": body, "headers": auth | {"Content-Type": "application/json"}},
        ),
        ("GET", "/agent/v1/archives", {"headers": auth}),
        (
            "POST",
            "/agent/v1/archives?date=_full&table=gpu_device",
            {"content": b"x", "headers": auth | {"Content-Type": "application/gzip"}},
        ),
        ("DELETE", "/agent/v1/archives?olderThanDays=30", {"headers": auth}),
    ]


async def _refused_everywhere(client: httpx.AsyncClient, base_url: str, token: str) -> None:
    for method, path, kwargs in _agent_calls(token):
        r = await client.request(method, path, **kwargs)
        assert r.status_code == 401, (method, path, r.text)
        detail = r.json()["detail"]
        assert isinstance(detail, str)
        assert token not in detail
    with pytest.raises(InvalidStatus) as refused:
        async with agent_socket(base_url, token):
            pass
    assert refused.value.response.status_code == 401


async def test_every_agent_route_refuses_what_is_not_a_live_agent_token(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "acme")
    revoked = await enroll(client, tenant, "revoked")
    r = await client.post(
        f"/api/v1/workspaces/acme/hosts/{revoked['hostId']}/revoke", headers=tenant.auth()
    )
    assert r.status_code == 200
    issued = await client.post(
        "/api/v1/workspaces/acme/enrollment-tokens", json={}, headers=tenant.auth()
    )
    async with serve(app) as url:
        for token in (
            revoked["agentToken"],
            tenant.admin_token,  # a personal API token
            issued.json()["enrollmentToken"],
            "gua_agent_deadbeef_" + "x" * 43,  # well-formed, unknown
            "gua_agent_" + "x" * 300,  # longer than any agent token
        ):
            await _refused_everywhere(client, url, token)


async def test_the_cache_is_trusted_only_while_the_listener_is_up(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    runtime: Runtime = app.state.runtime
    digest = tokens.digest(host["agentToken"])
    assert not await refuses_token(client, host)
    assert digest in runtime.access.cache

    await runtime.stream.stop()  # no listener: revocation notices could be missed
    assert runtime.stream.listener_epoch() is None
    assert not runtime.access.cache
    assert not await refuses_token(client, host)
    assert digest not in runtime.access.cache  # looked up, not kept
    # Revoked with no notice at all: refused at once, since nothing is cached.
    await execute(app, "UPDATE hosts SET revoked_at = now() WHERE public_id = %s", host["hostId"])
    assert await refuses_token(client, host)

    await execute(app, "UPDATE hosts SET revoked_at = NULL WHERE public_id = %s", host["hostId"])
    await runtime.stream.start(runtime.stream._conninfo, runtime.pool)
    assert await runtime.stream.wait_listening(10)
    assert not await refuses_token(client, host)
    assert digest in runtime.access.cache


async def test_a_garbled_revocation_notice_is_ignored(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    runtime: Runtime = app.state.runtime
    assert not await refuses_token(client, host)
    for payload in ("garbage", "1:", ":1", "-1:-1", "9" * 100 + ":1"):
        await execute(app, "SELECT pg_notify('gua_revoke', %s)", payload)
    await execute(app, "SELECT pg_notify('gua_stream', 'x')")
    assert not await refuses_token(client, host)
    assert runtime.stream.listener_epoch() is not None


@pytest.mark.parametrize(
    "days",
    ["99999999999999999999", "1" + "0" * 5000, "36501", "-1", "1e3", "٣", " 5", "soon", ""],
)
async def test_a_prune_with_a_bad_older_than_days_is_a_422(
    app: FastAPI, client: httpx.AsyncClient, days: str
) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    r = await client.delete(
        "/agent/v1/archives",
        params={"olderThanDays": days},
        headers={"Authorization": f"Bearer {host['agentToken']}"},
    )
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str)
    assert len(detail) < 300
