"""A request whose database connection dies under it (its backend terminated while the
request waits on a lock, as a PostgreSQL restart ends every backend) is a 503 with a
string detail and Retry-After; a page is a 503 page. The next request is served on a
new connection; a live stream that can no longer check its listener ends cleanly. The
whole board under a real restart: tests/ops/test_database_restart.py.

Also attacked, and held: pg_terminate_backend of the request's backend while it waits on
a lock, for each of 38 tables under 34 routes (API, pages, CSV, statements, FOCUS, the
reservations report and .ics, archives, sign-in, admin forms): every one a 503 with a
string detail and Retry-After (a page for pages), none a 500; only a report already
streaming ends its body unfinished (its 200 was sent); the next request is served.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import httpx
import psycopg
import pytest

from board.stream import sse
from tests.board.builders import enroll, example, make_tenant, push, retimed
from tests.web.helpers import sign_in


async def killed_while_waiting(
    database_url: str, table: str, request: Awaitable[httpx.Response]
) -> httpx.Response:
    """`request`'s answer when its backend is terminated while it waits on `table`."""
    dbname = database_url.rsplit("/", 1)[1]
    async with (
        await psycopg.AsyncConnection.connect(database_url) as locker,
        await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin,
    ):
        await locker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        answer = asyncio.ensure_future(request)
        try:
            async with asyncio.timeout(60):
                while True:
                    cur = await admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = %s AND wait_event_type = 'Lock'",
                        [dbname],
                    )
                    if await cur.fetchall():
                        break
                    await asyncio.sleep(0.05)
            return await answer
        finally:
            answer.cancel()
            await locker.rollback()


def assert_unavailable(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text[:500]
    assert isinstance(r.json()["detail"], str)
    assert r.headers["retry-after"].isdigit()


async def test_the_api_answers_503_when_the_connection_dies(
    app: Any, client: httpx.AsyncClient, database_url: str
) -> None:
    tenant = await make_tenant(app, "acme")
    hosts = f"/api/v1/workspaces/{tenant.slug}/hosts"
    r = await killed_while_waiting(database_url, "hosts", client.get(hosts, headers=tenant.auth()))
    assert_unavailable(r)
    assert (await client.get(hosts, headers=tenant.auth())).status_code == 200


async def test_a_page_is_a_503_page_when_the_connection_dies(
    app: Any, client: httpx.AsyncClient, database_url: str
) -> None:
    await make_tenant(app, "acme")
    assert (await sign_in(client, "admin@acme.example")).status_code == 303
    r = await killed_while_waiting(database_url, "hosts", client.get("/w/acme/"))
    assert r.status_code == 503
    assert r.headers["content-type"].startswith("text/html")
    assert "Not available right now" in r.text
    assert r.headers["retry-after"].isdigit()
    assert (await client.get("/w/acme/")).status_code == 200


async def test_a_push_answers_503_when_the_connection_dies(
    app: Any, client: httpx.AsyncClient, database_url: str
) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant, "gpu-1")
    token = host["agentToken"]
    assert (
        await push(client, token, retimed(example("observation-1.8.0-fake.json")))
    ).status_code == 202
    body = retimed(example("observation-1.8.0-fake.json"))
    r = await killed_while_waiting(database_url, "hosts", push(client, token, body))
    assert_unavailable(r)
    # Refused, so not stored: the agent pushes it again, and that is stored.
    assert (await push(client, token, body)).json()["duplicate"] is False


async def test_a_live_stream_ends_cleanly_when_its_recheck_finds_no_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as s:  # a port nothing listens on: the database is away
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def allowed() -> bool:
        async with await psycopg.AsyncConnection.connect(
            f"postgresql://postgres@127.0.0.1:{port}/board", connect_timeout=10
        ):
            return True

    async def events() -> AsyncIterator[str]:
        while True:
            yield ": keepalive\n\n"

    monkeypatch.setattr(sse, "RECHECK_SECONDS", 0.0)  # every event is rechecked
    sent = [event async for event in sse.while_allowed(events(), allowed)]
    assert sent == []  # ended at the first recheck, without an error
