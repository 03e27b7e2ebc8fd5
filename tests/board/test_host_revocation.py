"""Revoking a host: the first revoke's time stays, and it reaches every board process at
once (tokens refused, sockets closed).

Two app instances (two lifespans: two runtimes, two token caches, two listener
connections) share one database, as two `gua-board serve` processes do. The host is
revoked through one; the other must refuse it within a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from websockets.exceptions import ConnectionClosed

from board.app import create_app
from board.auth import tokens
from board.runtime import Runtime
from board.settings import Settings
from tests.board.answers import refused
from tests.board.builders import enroll, example, make_tenant, retimed
from tests.board.db import execute
from tests.board.test_stream import agent_socket, serve, util_message
from tests.web.helpers import csrf_of, sign_in

DEADLINE = 15.0  # generous: the promise is about a second


@pytest.fixture
async def second_app(settings: Settings) -> AsyncIterator[FastAPI]:
    """Another board process on the test's database."""
    application = create_app(settings, run_maintenance=False)
    async with application.router.lifespan_context(application):
        assert await application.state.runtime.stream.wait_listening(10)
        yield application


@contextlib.asynccontextmanager
async def client_of(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as c:
        yield c


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {DEADLINE}s: {what}")


def bearer(host: dict[str, Any], json_body: bool = False) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {host['agentToken']}"}
    if json_body:
        headers["Content-Type"] = "application/json"
    return headers


async def refuses_token(c: httpx.AsyncClient, host: dict[str, Any]) -> bool:
    """The token itself is refused (401), not just the push's transaction.

    An invalid body would be a 422 if the token still passed, so a 401 here shows the
    process's token check, its cache included, knows about the revocation.
    """
    r = await c.post("/agent/v1/observations", content=b"{}", headers=bearer(host, True))
    return r.status_code == 401


def cached_hosts(app: FastAPI) -> set[tuple[int, int]]:
    runtime: Runtime = app.state.runtime
    return {entry.host.key for entry in runtime.access.cache.values()}


async def _warm(app: FastAPI, host: dict[str, Any]) -> None:
    """Push through `app`, so its token cache holds the host."""
    async with client_of(app) as c:
        body = json.dumps(retimed(example("observation-1.8.0-fake.json")))
        r = await c.post("/agent/v1/observations", content=body, headers=bearer(host, True))
        assert r.status_code == 202, r.text
        r = await c.post("/agent/v1/observations", content=b"{}", headers=bearer(host, True))
        assert r.status_code == 422  # the token passes: the body is what is wrong
    assert cached_hosts(app)


async def _closed(ws: Any) -> int | None:
    """Wait for the board to close the socket (the agent only sends); its close code."""
    try:
        while True:
            await ws.send(util_message())
            await asyncio.sleep(0.3)
    except ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd else None


async def test_revoked_through_one_process_is_refused_by_the_other(
    app: FastAPI, client: httpx.AsyncClient, second_app: FastAPI
) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    keep = await enroll(client, tenant, "keep")
    await _warm(second_app, host)
    await _warm(second_app, keep)
    async with serve(second_app) as other_url, client_of(second_app) as other:
        assert (await other.get("/agent/v1/archives", headers=bearer(host))).status_code == 200
        async with (
            agent_socket(other_url, host["agentToken"]) as ws,
            agent_socket(other_url, keep["agentToken"]) as kept_ws,
        ):
            await ws.send(util_message())
            closing = asyncio.create_task(_closed(ws))

            r = await client.post(
                f"/api/v1/workspaces/acme/hosts/{host['hostId']}/revoke", headers=tenant.auth()
            )
            assert r.status_code == 200, r.text

            assert await asyncio.wait_for(closing, DEADLINE) == 1008
            await eventually(lambda: refuses_token(other, host), "the token refused there")
            r = await other.get("/agent/v1/archives", headers=bearer(host))
            assert r.status_code == 401
            assert isinstance(r.json()["detail"], str)
            r = await other.delete("/agent/v1/archives?olderThanDays=30", headers=bearer(host))
            assert r.status_code == 401
            # A new socket is refused at the upgrade.
            with pytest.raises(Exception, match="401"):
                async with agent_socket(other_url, host["agentToken"]):
                    pass
            # The other host is untouched: its socket stays, its token still passes.
            await kept_ws.send(util_message())
            assert not await refuses_token(other, keep)


async def test_revoked_on_the_admin_page_is_refused_by_the_other(
    app: FastAPI, client: httpx.AsyncClient, second_app: FastAPI
) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    await _warm(second_app, host)
    signed_in = await sign_in(client, "admin@acme.example")
    assert signed_in.status_code in (302, 303), signed_in.text[:300]
    page = await client.get("/w/acme/admin")
    assert page.status_code == 200
    r = await client.post(
        f"/w/acme/admin/hosts/{host['hostId']}/revoke", data={"csrf_token": csrf_of(page.text)}
    )
    assert r.status_code in (302, 303), r.text[:300]
    async with client_of(second_app) as other:
        await eventually(lambda: refuses_token(other, host), "the token refused there")
        r = await other.get("/agent/v1/archives", headers=bearer(host))
        assert r.status_code == 401


async def test_without_the_listener_the_cache_is_not_trusted(
    app: FastAPI, client: httpx.AsyncClient, second_app: FastAPI
) -> None:
    """Revoked by hand in the database (no notice at all) while the other process's
    listener is cut: once it notices, it trusts nothing it cached before."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    await _warm(second_app, host)
    runtime: Runtime = second_app.state.runtime
    async with serve(second_app) as other_url, client_of(second_app) as other:
        async with agent_socket(other_url, host["agentToken"]) as ws:
            await ws.send(util_message())
            closing = asyncio.create_task(_closed(ws))
            epoch = runtime.stream.listener_epoch()
            assert epoch is not None
            await execute(app, "SELECT pg_terminate_backend(%s)", runtime.stream.listener_pid)
            await execute(
                app, "UPDATE hosts SET revoked_at = now() WHERE public_id = %s", host["hostId"]
            )
            await eventually(
                _epoch_changed(runtime, epoch), "the listener noticed it was cut and came back"
            )
            await eventually(lambda: refuses_token(other, host), "the token refused there")
            assert await asyncio.wait_for(closing, DEADLINE) == 1008


def _epoch_changed(runtime: Runtime, epoch: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return runtime.stream.listener_epoch() not in (None, epoch)

    return check


async def test_a_lookup_racing_a_revocation_does_not_cache_it(app: FastAPI, client) -> None:
    """A lookup that read the host just before its revocation was announced must not
    leave it in the cache afterwards."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    runtime: Runtime = app.state.runtime
    access = runtime.access
    real_lookup = access._lookup
    key: list[tuple[int, int]] = []

    async def lookup_then_revoked(digest: bytes) -> Any:
        found = await real_lookup(digest)
        assert found is not None
        key.append(found.key)
        access.forget_host(*found.key)  # announced while the lookup was in flight
        return found

    access._lookup = lookup_then_revoked  # type: ignore[method-assign]
    await access.authenticate(f"Bearer {host['agentToken']}")
    access._lookup = real_lookup  # type: ignore[method-assign]
    assert tokens.digest(host["agentToken"]) not in access.cache


async def test_repeated_host_revokes_keep_the_first_time(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "rerevoke")
    host = await enroll(client, tenant, "twice")
    url = f"/api/v1/workspaces/{tenant.slug}/hosts/{host['hostId']}/revoke"
    first = await client.post(url, headers=tenant.auth())
    second = await client.post(url, headers=tenant.auth())
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    assert first.json()["revokedAt"] == second.json()["revokedAt"]
    r = await client.post(
        "/agent/v1/observations",
        json={},
        headers={"Authorization": f"Bearer {host['agentToken']}"},
    )
    refused(r, 401)
