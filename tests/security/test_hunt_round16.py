"""Round 16 of the hunt: database outages, the audit trail's addresses and retention,
caps and report slots under concurrency, validation sentences.

Each test asserts the behaviour that must hold, and failed on the defect it names:

- `member.joined` (a person who joins by single sign-on) was recorded without the
  client address, the one audit entry still without one (fixed);
- the usage page and usage.csv ran year-long usage reports outside the workspace's
  report slots, on the request's pooled connection (fixed);
- a report request opened a PostgreSQL connection before it knew a slot was free, so a
  flood of them from one workspace held as many backends (fixed: at most REPORT_SLOTS
  requests of a workspace connect and seek a slot at once in a process; the rest are
  refused before connecting).

Attacks that held (no test): pg_terminate_backend of the request's backend while it
waits on a lock, for each of 38 tables under 34 routes (API, pages, CSV, statements,
FOCUS, the reservations report and .ics, archives, sign-in, admin forms): every one a
503 with a string detail and Retry-After (a page for pages), none a 500; only a report
already streaming ends its body unfinished (its 200 was sent); the next request is
served. Personal API tokens issued 30 at once, half by the API and half by the
account page: 20 live, the rest 409.

In process (the app and a real PostgreSQL; a real OpenID provider on loopback that
signs its ID tokens).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg
import pytest

from board.app import create_app
from board.db.urls import libpq_url
from board.reportkit.slots import APPLICATION_NAME, REPORT_SLOTS, slot_key
from board.settings import Settings
from tests.board.builders import make_tenant
from tests.board.db import scalar
from tests.security.test_hunt_integrations import (  # noqa: F401 (fixtures)
    SigningProvider,
    _claims,
    browser_of,
    settings,
    signing_provider,
    smtp,
)
from tests.web.helpers import sign_in

# ---- 1. every audit entry says from where ------------------------------------------------


@pytest.fixture
async def joining_app(
    settings: Settings,  # noqa: F811
    signing_provider: SigningProvider,  # noqa: F811
) -> AsyncIterator[Any]:
    """The app with a provider that lets new people of acme.example join "acme"."""
    configured = Settings(
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        sso_providers=[
            {
                "name": "stub",
                "display_name": "Stub",
                "issuer": signing_provider.issuer,
                "client_id": "gua-board",
                "client_secret": "stub-client-secret-0123456789",
                "allowed_domains": ["acme.example"],
                "join_workspace": "acme",
            }
        ],
    )
    application = create_app(configured, run_maintenance=False)
    async with application.router.lifespan_context(application):
        yield application


async def test_a_person_who_joins_by_single_sign_on_is_audited_with_an_address(
    joining_app: Any,
    signing_provider: SigningProvider,  # noqa: F811
) -> None:
    """Was: `member.joined`, written when single sign-on makes an account for a new
    person of an allowed domain, was the one entry still recorded without the client's
    address (board/sso/service.py called record_event without it): the audit log showed
    who joined the workspace but not from where, while the sign-in of the same request
    said it."""
    await make_tenant(joining_app, "acme")
    async with browser_of(joining_app) as browser:
        started = await browser.get("/signin/sso/stub", params={"next": "/w/acme/"})
        assert started.status_code == 303, started.text
        query = parse_qs(urlsplit(started.headers["location"]).query)
        signing_provider.claims = _claims(
            signing_provider, query["nonce"][0], {"email": "newcomer@acme.example"}
        )
        r = await browser.get(
            "/signin/sso/stub/callback", params={"state": query["state"][0], "code": "c"}
        )
        assert r.status_code == 303, r.text[:500]
    rows = await scalar(
        joining_app,
        "SELECT json_agg(json_build_array(action, client_address)) FROM audit_events",
    )
    addresses = dict(rows)
    assert "member.joined" in addresses, addresses
    assert addresses == {"member.joined": "127.0.0.1", "signin.succeeded": "127.0.0.1"}


# ---- 2. the report slots ---------------------------------------------------------------

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
