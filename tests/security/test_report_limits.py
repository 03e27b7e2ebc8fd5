"""At most REPORT_SLOTS reports run at once per workspace: beyond that a 429 with
Retry-After and a readable detail, before any work and before a database connection is
opened; the usage page and its CSV take a slot too; a slot is freed when its report ends,
fails, or its holder's connection goes (on the served board too: a client gone mid-body,
or stalled until it goes); other workspaces are not affected."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import struct
import time
import zoneinfo
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from board.db.urls import libpq_url
from board.reportkit.slots import APPLICATION_NAME, REPORT_SLOTS, SLOT_LOCK_BASE, slot_key
from tests.board.builders import make_tenant
from tests.board.db import scalar
from tests.board.test_reports_builders import quick_tenant, workspace_id
from tests.security.conftest import db
from tests.security.seed import Tenant as SeedTenant
from tests.security.seed import enroll as seed_enroll
from tests.security.seed import make_tenant as seed_make_tenant
from tests.security.seed import observation as seed_observation
from tests.security.seed import push as seed_push
from tests.support.live import LiveBoard
from tests.web.helpers import sign_in

QUERY = "from=2026-11-01&to=2026-11-03"


async def _held_slots(conn: psycopg.AsyncConnection[Any], ws: int) -> int:
    keys = [slot_key(slot, ws) for slot in range(REPORT_SLOTS)]
    cur = await conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
        "AND (classid::bigint, objid::bigint) IN "
        "(SELECT * FROM unnest(%s::bigint[], %s::bigint[]))",
        [[k[0] for k in keys], [k[1] for k in keys]],
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def _wait_all_free(conn: psycopg.AsyncConnection[Any], ws: int) -> None:
    """A closed connection's backend lets go of its locks a moment after the close."""
    deadline = time.monotonic() + 60
    while await _held_slots(conn, ws):
        assert time.monotonic() < deadline, "report slots still held"
        await asyncio.sleep(0.05)


async def test_full_slots_answer_429_and_free_ones_run(app, client) -> None:
    acme = await quick_tenant(app, "limits")
    other = await quick_tenant(app, "limits")
    url = libpq_url(app.state.runtime.database_url)
    usage = f"/api/v1/workspaces/{acme.slug}/reports/usage?{QUERY}"
    holders = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as probe:
        ws = await workspace_id(probe, acme.slug)
        # Other reports (in any worker or replica) hold every slot of acme.
        for slot in range(REPORT_SLOTS):
            holder = await psycopg.AsyncConnection.connect(url, autocommit=True)
            await holder.execute("SELECT pg_advisory_lock(%s, %s)", list(slot_key(slot, ws)))
            holders.append(holder)
        try:
            for path in ("usage", "utilization"):
                for fmt in ("json", "csv"):
                    r = await client.get(
                        f"/api/v1/workspaces/{acme.slug}/reports/{path}?{QUERY}&format={fmt}",
                        headers=acme.auth("finance"),
                    )
                    assert r.status_code == 429, r.text
                    assert int(r.headers["Retry-After"]) > 0
                    detail = r.json()["detail"]
                    assert isinstance(detail, str)
                    assert f"{REPORT_SLOTS} reports" in detail
            # Another workspace is not limited by acme's reports.
            r = await client.get(
                f"/api/v1/workspaces/{other.slug}/reports/usage?{QUERY}",
                headers=other.auth("finance"),
            )
            assert r.status_code == 200
            # Bad input is still a 422 (checked before a slot is sought), another
            # workspace's slug still a 404.
            r = await client.get(
                f"/api/v1/workspaces/{acme.slug}/reports/usage?from=x&to=y",
                headers=acme.auth("finance"),
            )
            assert r.status_code == 422
            r = await client.get(
                f"/api/v1/workspaces/{acme.slug}/reports/usage?{QUERY}",
                headers=other.auth("finance"),
            )
            assert r.status_code == 404
            # One holder's connection ends: its slot is free again.
            await holders.pop().close()
            deadline = time.monotonic() + 60
            while await _held_slots(probe, ws) == REPORT_SLOTS:
                assert time.monotonic() < deadline, "the closed holder kept its slot"
                await asyncio.sleep(0.05)
            r = await client.get(usage, headers=acme.auth("finance"))
            assert r.status_code == 200, r.text
        finally:
            for holder in holders:
                await holder.close()
        await _wait_all_free(probe, ws)


@pytest.fixture
def zone_only_python_knows(tmp_path: Path) -> Iterator[str]:
    """A real zone file under a name only Python's zone search path has."""
    name = "Gua/Only_Python"
    (tmp_path / "Gua").mkdir()
    shutil.copyfile(Path(zoneinfo.TZPATH[0]) / "Asia" / "Kolkata", tmp_path / name)
    before = zoneinfo.TZPATH
    zoneinfo.reset_tzpath(to=[str(tmp_path), *before])
    zoneinfo.ZoneInfo.clear_cache()
    try:
        yield name
    finally:
        zoneinfo.reset_tzpath(to=before)
        zoneinfo.ZoneInfo.clear_cache()


async def test_slots_are_freed_when_reports_end_or_fail(
    app, client, zone_only_python_knows: str
) -> None:
    tenant = await quick_tenant(app, "limits")
    url = libpq_url(app.state.runtime.database_url)
    auth = tenant.auth("finance")
    base = f"/api/v1/workspaces/{tenant.slug}/reports"
    # Fails after taking a slot: a zone Python reads but PostgreSQL does not know is the
    # database's refusal, a 422 of the report.
    failing = f"{base}/usage?{QUERY}&groupBy=day&tz={zone_only_python_knows}"
    for _ in range(2 * REPORT_SLOTS):
        r = await client.get(failing, headers=auth)
        assert r.status_code == 422, r.text
        assert isinstance(r.json()["detail"], str)
    for _ in range(2 * REPORT_SLOTS):
        for path in ("usage", "utilization"):
            r = await client.get(f"{base}/{path}?{QUERY}", headers=auth)
            assert r.status_code == 200, r.text
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as probe:
        ws = await workspace_id(probe, tenant.slug)
        await _wait_all_free(probe, ws)


async def test_the_reservations_report_and_statements_take_a_slot(app, client) -> None:
    """They ran outside the slots: any number of them at once, each a month of rollups."""
    acme = await make_tenant(app, "busy")
    url = libpq_url(app.state.runtime.database_url)
    assert (await sign_in(client, "finance@busy.example")).status_code == 303
    reservations = f"/api/v1/workspaces/busy/reports/reservations?{QUERY}"
    pages = ("/w/busy/statements?month=2026-11", "/w/busy/statements.csv?month=2026-11&team=ml")
    holders = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as probe:
        ws = await workspace_id(probe, "busy")
        for slot in range(REPORT_SLOTS):
            holder = await psycopg.AsyncConnection.connect(url, autocommit=True)
            await holder.execute("SELECT pg_advisory_lock(%s, %s)", list(slot_key(slot, ws)))
            holders.append(holder)
        try:
            for fmt in ("json", "csv"):
                r = await client.get(f"{reservations}&format={fmt}", headers=acme.auth("finance"))
                assert r.status_code == 429, r.text
                assert int(r.headers["Retry-After"]) > 0
                assert f"{REPORT_SLOTS} reports" in r.json()["detail"]
            # Bad input is still a 422, checked before a slot is sought.
            r = await client.get(
                "/api/v1/workspaces/busy/reports/reservations?from=x&to=y",
                headers=acme.auth("finance"),
            )
            assert r.status_code == 422
            assert isinstance(r.json()["detail"], str)
            for page in pages:
                r = await client.get(page)
                assert r.status_code == 429, (page, r.text[:300])
                assert int(r.headers["Retry-After"]) > 0
                assert f"{REPORT_SLOTS} reports" in r.text
        finally:
            for holder in holders:
                await holder.close()
        await _wait_all_free(probe, ws)
        # Free slots: each runs, and gives its slot back when done.
        r = await client.get(reservations, headers=acme.auth("finance"))
        assert r.status_code == 200, r.text
        for page in pages:
            r = await client.get(page)
            assert r.status_code == 200, (page, r.text[:300])
        await _wait_all_free(probe, ws)


WINDOW = "from=2025-11-01&to=2026-11-01"


async def test_the_usage_page_and_its_csv_take_a_report_slot(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was: the usage page and usage.csv ran the usage report (up to 400 days, the page
    twice: the table and the day chart) on the request's pooled connection, outside the
    workspace's report slots that the REST reports, the reservations report and the
    statements hold. With every slot taken, any signed-in reader (finance included) could
    still run any number of year-long reports at once, each holding one of the process's
    few pooled connections that every other workspace's pages and API calls need."""
    await make_tenant(app, "slots")
    assert (await sign_in(client, "finance@slots.example")).status_code == 303
    url = libpq_url(app.state.runtime.database_url)
    ws = await scalar(app, "SELECT id FROM workspaces WHERE slug = 'slots'")
    pages = (f"/w/slots/usage?{WINDOW}&groupBy=user,day", f"/w/slots/usage.csv?{WINDOW}")
    holders = []
    try:
        for slot in range(REPORT_SLOTS):
            holder = await psycopg.AsyncConnection.connect(url, autocommit=True)
            holders.append(holder)
            await holder.execute("SELECT pg_advisory_lock(%s, %s)", list(slot_key(slot, ws)))
        for page in pages:
            r = await client.get(page)
            assert r.status_code == 429, (page, r.status_code, r.text[:300])
            assert int(r.headers["Retry-After"]) > 0
            assert f"{REPORT_SLOTS} reports" in r.text
        # Bad input is still the page's 422, told before a slot is sought.
        r = await client.get("/w/slots/usage?from=2026-13-01&to=2026-11-01")
        assert r.status_code == 422, r.text[:300]
    finally:
        for holder in holders:
            await holder.close()
    for page in pages:  # the slots free: each runs
        r = await client.get(page)
        assert r.status_code == 200, (page, r.text[:300])


async def test_a_flood_of_reports_opens_no_more_connections_than_the_slots(
    app: Any, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """take_report_connection opens a new PostgreSQL connection (outside every pool) for
    each report request and only then tries the workspace's slots: with the slots taken,
    each refused request still costs a backend. Any reader (finance included) sending a
    few hundred report requests at once holds that many connections at a moment, past
    PostgreSQL's max_connections (100 by default), and then every other workspace's pages,
    reports and pushes fail to connect. A workspace's requests must not have more report
    connections open or opening than its slots, in one process at least.

    The connections are counted as they open and close (the real ones, passed through);
    an opening waits until all requests have asked or a generous deadline, as on a
    database slow to start backends, so the count does not depend on scheduling."""
    tenant = await make_tenant(app, "flood")
    url = libpq_url(app.state.runtime.database_url)
    ws = await scalar(app, "SELECT id FROM workspaces WHERE slug = 'flood'")
    asked = 12
    opening = {"now": 0, "most": 0, "asked": 0}
    everyone_asked = asyncio.Event()
    connect = psycopg.AsyncConnection.connect

    async def counted(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("application_name") != APPLICATION_NAME:
            return await connect(*args, **kwargs)
        opening["now"] += 1
        opening["most"] = max(opening["most"], opening["now"])
        opening["asked"] += 1
        if opening["asked"] >= asked:
            everyone_asked.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                await everyone_asked.wait()
        conn = await connect(*args, **kwargs)
        close = conn.close

        async def closed() -> None:
            opening["now"] -= 1
            conn.close = close  # type: ignore[method-assign]
            await close()

        conn.close = closed  # type: ignore[method-assign]
        return conn

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", counted)
    holders = []
    try:
        for slot in range(REPORT_SLOTS):
            holder = await psycopg.AsyncConnection.connect(url, autocommit=True)
            holders.append(holder)
            await holder.execute("SELECT pg_advisory_lock(%s, %s)", list(slot_key(slot, ws)))
        answers = await asyncio.gather(
            *(
                client.get(
                    f"/api/v1/workspaces/flood/reports/usage?{WINDOW}",
                    headers=tenant.auth("finance"),
                )
                for _ in range(asked)
            )
        )
    finally:
        for holder in holders:
            await holder.close()
    assert {r.status_code for r in answers} == {429}
    assert opening["most"] <= REPORT_SLOTS, (
        f"{opening['most']} report connections of one workspace open at once, "
        f"for {REPORT_SLOTS} slots"
    )


SLOT_REPORTS = (
    "reports/usage?from=2026-01-01&to=2026-12-31&groupBy=user,day&format=csv",
    "reports/utilization?from=2026-01-01&to=2026-12-31&groupBy=gpu&bucket=hour",
    "reports/focus?from=2026-01-01&to=2026-12-31",
)


def _slots_held_on_board(url: str, workspace: int) -> int:
    keys = [SLOT_LOCK_BASE + slot for slot in range(REPORT_SLOTS)]
    found = db(
        url,
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
        "AND classid::bigint = ANY(%s) AND objid::bigint = %s",
        keys,
        workspace & 0x7FFFFFFF,
    )
    return int(str(found))


def _ask_and_go(board: LiveBoard, token: str, path: str, read_head: bool) -> None:
    """A raw request for a report, then a reset (SO_LINGER 0): after the answer's head,
    or before anything came back."""
    sock = socket.create_connection(("127.0.0.1", board.port), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    try:
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: board.test\r\nAuthorization: Bearer {token}\r\n"
            "Accept-Encoding: gzip\r\n\r\n".encode()
        )
        if read_head:
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = sock.recv(1024)
                assert chunk, got
                got += chunk
            assert got.startswith(b"HTTP/1.1 200 "), got[:200]
    finally:
        sock.close()


def test_clients_gone_mid_report_free_their_slots(board: LiveBoard, scratch: SeedTenant) -> None:
    """Every slot taken by a client that went away (after the head, or before it) is
    free again, and the workspace's reports answer."""
    url = board.env["GUA_BOARD_DATABASE_URL"]
    workspace = int(str(db(url, "SELECT id FROM workspaces WHERE slug = %s", scratch.slug)))
    token = scratch.finance.token
    for read_head in (True, False):
        for path in SLOT_REPORTS:
            for _ in range(REPORT_SLOTS + 1):
                _ask_and_go(board, token, f"/api/v1/workspaces/{scratch.slug}/{path}", read_head)
        deadline = time.monotonic() + 60
        while _slots_held_on_board(url, workspace):
            assert time.monotonic() < deadline, "a gone client's report kept its slot"
            time.sleep(0.1)
    # Waits for handlers that began after the client went, too: each must end.
    with board.client(token) as c:
        for path in SLOT_REPORTS:
            deadline = time.monotonic() + 60
            while True:
                reply = board.call(c, "GET", f"/api/v1/workspaces/{scratch.slug}/{path}")
                if reply.status_code == 200:
                    break
                assert reply.status_code == 429, reply
                assert time.monotonic() < deadline, f"slots still taken: {reply}"
                time.sleep(0.5)


@pytest.fixture(scope="module")
def big(board: LiveBoard) -> SeedTenant:
    """A workspace whose month of hourly per-GPU utilization is ~14 MB of JSON: 64 GPUs
    observed once a day (a day-long sample gap, so every hour is covered)."""
    tenant = seed_make_tenant(board, "delta")
    host = seed_enroll(board, tenant, "delta-node")
    with board.client(tenant.admin.token) as c:
        reply = board.call(
            c,
            "PATCH",
            f"/api/v1/workspaces/{tenant.slug}/settings",
            json={"maxSampleGapSeconds": 86400, "maxSampleGapFrom": "2000-01-01T00:00:00Z"},
        )
        assert reply.status_code == 200, reply
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    uuids = tuple(f"GPU-delta-{i:02d}" for i in range(64))
    for days in range(30, -1, -1):
        body = seed_observation(now - timedelta(days=days), gpu_uuids=uuids)
        reply = seed_push(board, host, body)
        assert reply.status_code == 202, reply
    return tenant


def test_readers_stalled_mid_body_hold_their_slots_until_they_go(
    board: LiveBoard, big: SeedTenant, scratch: SeedTenant
) -> None:
    """Three clients read a large report's head and then nothing: the reports stay
    mid-body (documented: a client that never reads holds its handler), so a fourth
    is a 429 with Retry-After and a detail (another workspace's is not). Once they
    reset their connections, every slot is free and the workspace's reports answer."""
    url = board.env["GUA_BOARD_DATABASE_URL"]
    workspace = int(str(db(url, "SELECT id FROM workspaces WHERE slug = %s", big.slug)))
    today = datetime.now(UTC).date()
    path = (
        f"/api/v1/workspaces/{big.slug}/reports/utilization?from={today - timedelta(days=31)}"
        f"&to={today + timedelta(days=1)}&groupBy=gpu&bucket=hour"
    )
    stalled = []
    try:
        for _ in range(REPORT_SLOTS):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(30)
            sock.connect(("127.0.0.1", board.port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            stalled.append(sock)
            sock.sendall(
                f"GET {path} HTTP/1.1\r\nHost: board.test\r\n"
                f"Authorization: Bearer {big.finance.token}\r\n\r\n".encode()
            )
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = sock.recv(1024)
                assert chunk, got
                got += chunk
            assert got.startswith(b"HTTP/1.1 200 "), got[:200]
        deadline = time.monotonic() + 30
        while _slots_held_on_board(url, workspace) < REPORT_SLOTS:
            assert time.monotonic() < deadline, "the stalled reports ended on their own"
            time.sleep(0.1)
        with board.client(big.finance.token) as c:
            reply = board.call(c, "GET", path)
        assert reply.status_code == 429, reply
        assert int(reply.headers["Retry-After"]) > 0, reply
        assert "reports running" in reply.detail(), reply
        # Another workspace's reports are not limited by these.
        with board.client(scratch.finance.token) as c:
            other = board.call(c, "GET", path.replace(big.slug, scratch.slug))
        assert other.status_code == 200, other
    finally:
        for sock in stalled:
            sock.close()
    deadline = time.monotonic() + 60
    while _slots_held_on_board(url, workspace):
        assert time.monotonic() < deadline, "a reset client's report kept its slot"
        time.sleep(0.1)
    with board.client(big.finance.token) as c:
        reply = board.call(c, "GET", path.replace("bucket=hour", "bucket=day"))
    assert reply.status_code == 200, reply
    assert len(reply.json()["rows"]) >= 64 * 30, len(reply.json()["rows"])
