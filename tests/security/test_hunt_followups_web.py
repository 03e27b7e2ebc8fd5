"""Follow-ups of the hunt on the pages and the live stream.

Pages: a workspace in a zone with a half-hour offset (Asia/Kolkata) was a 422 on every
page that cut its window from local dates (the people view, the usage page and its CSV,
the team statements): report bounds must fall on whole UTC hours. The reports now cut a
local day there as the UTC hours that start on it (docs/reports.md), and the pages ask
for the dates themselves.

Stream: `GET …/stream?hostId=` took any string of any length, and an upper-case or
otherwise non-canonical UUID silently matched nothing. A hostId that is not a UUID is now
a 422 with a string detail; any spelling uuid.UUID reads matches its host; a host of
another workspace (or of none) was a stream of nothing and is now a 404, as the host
page's stream of it already was (docs/security.md: another workspace's host id is a 404).

In process (the app and a real PostgreSQL); the SSE streams over a real loopback port.
"""

from __future__ import annotations

import asyncio
import html
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import httpx
import pytest

from board.reports.params import day_now
from tests.board.answers import refused
from tests.board.builders import Tenant, enroll, make_tenant, push, spellings
from tests.board.test_reports_builders import gpu, observation, proc
from tests.board.test_stream import agent_socket, send_spaced, serve, sse, util_message
from tests.web.helpers import sign_in

HALF_HOUR_ZONE = "Asia/Kolkata"


async def set_zone(client: httpx.AsyncClient, tenant: Tenant, zone: str) -> None:
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings", json={"timezone": zone}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text


async def history(client: httpx.AsyncClient, tenant: Tenant, earlier: str, now: str) -> None:
    """`earlier` held GPU-0 a few minutes ago (credited to this week's rollups) and holds
    nothing now; `now` holds it now."""
    host = await enroll(client, tenant, f"{tenant.slug}-node")
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=4)
    for i, user in enumerate((earlier, earlier, now, now)):
        at = start + timedelta(minutes=i)
        body = observation(at, [gpu(0, util=50, state="active", procs=[proc(user)])])
        r = await push(client, host["agentToken"], body)
        assert r.status_code == 202, r.text


@pytest.fixture
async def kolkata(app: Any, client: httpx.AsyncClient) -> Tenant:
    """A workspace in Asia/Kolkata with this week's history, signed in as its admin, and
    a neighbour in UTC whose people it must never list."""
    other = await make_tenant(app, "globex")
    await history(client, other, "globexweekuser", "globexnowuser")
    tenant = await make_tenant(app, "kolkata")
    await set_zone(client, tenant, HALF_HOUR_ZONE)
    await history(client, tenant, "weekuser", "nowuser")
    r = await sign_in(client, "admin@kolkata.example")
    assert r.status_code == 303, r.text
    return tenant


def shows_only_its_own_people(r: httpx.Response) -> None:
    assert r.status_code == 200, (r.request.url, r.text[:500])
    assert "weekuser" in r.text, r.text[:2000]
    assert "nowuser" in r.text, r.text[:2000]
    assert "globex" not in r.text


async def test_the_people_page_of_a_half_hour_zone(
    client: httpx.AsyncClient, kolkata: Tenant
) -> None:
    """Was a 422: the week began at a Kolkata midnight, which is hh:30 in UTC."""
    r = await client.get(f"/w/{kolkata.slug}/people")
    shows_only_its_own_people(r)
    # Nobody holds `weekuser`'s GPU now: it is listed for this week's hours only.
    row = r.text[r.text.index("weekuser") :].split("</tr>")[0]
    assert 'data-label="GPUs held now">0<' in row, row
    assert (await client.get(f"/w/{kolkata.slug}/people?sort=hours")).status_code == 200


async def test_the_usage_page_and_csv_of_a_half_hour_zone(
    client: httpx.AsyncClient, kolkata: Tenant
) -> None:
    """Was a 422: the page's default window and its form are local dates."""
    base = f"/w/{kolkata.slug}"
    shows_only_its_own_people(await client.get(f"{base}/usage"))
    # Today as the reports count it: the local date the current UTC hour starts on.
    today = day_now(ZoneInfo(HALF_HOUR_ZONE))
    week = (today - timedelta(days=6)).isoformat()
    r = await client.get(f"{base}/usage?from={week}&through={today}&groupBy=user")
    shows_only_its_own_people(r)
    # The form still shows the dates asked for; the API link it shows works as it stands.
    assert f'value="{week}"' in r.text
    assert f'value="{today}"' in r.text
    api = html.unescape(r.text.split("GET ", 1)[1].split("</code>", 1)[0])
    assert api.startswith(f"/api/v1/workspaces/{kolkata.slug}/reports/usage?"), api
    shows_only_its_own_people(await client.get(api, headers=kolkata.auth()))
    csv = await client.get(f"{base}/usage.csv?from={today}&to={today + timedelta(days=1)}")
    shows_only_its_own_people(csv)
    assert f'filename="usage-{today}_{today}.csv"' in csv.headers["content-disposition"]
    # Days of a half-hour zone: the UTC hours that start on them, and the page says so.
    r = await client.get(f"{base}/usage?from={week}&through={today}&groupBy=day")
    assert r.status_code == 200, r.text[:500]
    assert "start on it" in r.text
    # A date that is no date is still the report's 422, never a 500.
    for query in ("from=2026-02-30", "from=0001-01-01", "to=9999-12-31", "from=soon"):
        refused(await client.get(f"{base}/usage.csv?{query}"), 422)


async def test_the_statements_of_a_half_hour_zone(
    client: httpx.AsyncClient, kolkata: Tenant
) -> None:
    """Was a 422: the month began at a Kolkata midnight."""
    base = f"/w/{kolkata.slug}"
    r = await client.get(f"{base}/statements")
    assert r.status_code == 200, r.text[:500]
    r = await client.get(f"{base}/statements?unassigned=1")
    shows_only_its_own_people(r)
    csv = await client.get(f"{base}/statements.csv?unassigned=1")
    shows_only_its_own_people(csv)


# ---- the live stream ------------------------------------------------------------------


@pytest.fixture
async def served(app: Any) -> AsyncIterator[str]:
    async with serve(app) as url:
        assert await app.state.runtime.stream.wait_listening(10)
        yield url


async def streamed_lately(client: httpx.AsyncClient, tenant: Tenant, host_id: str) -> None:
    """Waits (generously) until the hub keeps a sample of the host."""
    url = f"/api/v1/workspaces/{tenant.slug}/stream/latest"
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        r = await client.get(url, headers=tenant.auth())
        assert r.status_code == 200, r.text
        if host_id in {h["hostId"] for h in r.json()["hosts"]}:
            return
        assert asyncio.get_running_loop().time() < deadline, "the samples never arrived"
        await asyncio.sleep(0.05)


NOT_HOST_IDS = (
    "",
    "not-a-host",
    "x" * 65,
    "x" * 8000,
    "0" * 31,
    "0" * 33,
    "gua_agent_0123abcd_" + "A" * 40,
)


async def test_a_stream_hostid_that_is_no_uuid_is_422(app: Any, client: httpx.AsyncClient) -> None:
    """Was a 200 stream of nothing, for a hostId of any length."""
    tenant = await make_tenant(app, "acme")
    url = f"/api/v1/workspaces/{tenant.slug}/stream"
    for value in NOT_HOST_IDS:
        r = await client.get(url, params={"hostId": value}, headers=tenant.auth("member"))
        detail = refused(r, 422)
        assert "hostId" in detail
        if value:
            assert value[:8] not in detail  # not echoed: it may be a pasted token
    # A NUL in the URL is refused before any route (board.edge).
    refused(await client.get(f"{url}?hostId=%00", headers=tenant.auth("member")), 400)


async def test_a_stream_hostid_in_any_spelling_matches_its_host(
    app: Any, client: httpx.AsyncClient, served: str
) -> None:
    """Was a stream of nothing for an upper-case, braced, urn: or unhyphenated id."""
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    mine = await enroll(client, acme, "mine")
    theirs = await enroll(client, other, "theirs")
    for host in (mine, theirs):
        async with agent_socket(served, host["agentToken"]) as ws:
            await send_spaced(ws, [util_message(), util_message()])
    for tenant, host in ((acme, mine), (other, theirs)):
        await streamed_lately(client, tenant, host["hostId"])
    path = f"/api/v1/workspaces/{acme.slug}/stream?hostId="
    for spelled in [mine["hostId"], *spellings(mine["hostId"])]:
        async with sse(served, path + quote(spelled, safe=""), acme.auth("member")) as page:
            assert page.status == 200
            first = await page.next_util()
            assert first["hostId"] == mine["hostId"]
    # Another workspace's host, or none, in any spelling: a 404, as on the host page.
    for spelled in [theirs["hostId"], *spellings(theirs["hostId"]), str(uuid.uuid4())]:
        r = await client.get(path + quote(spelled, safe=""), headers=acme.auth("member"))
        assert "No such host" in refused(r, 404)
        assert "theirs" not in r.text
    # The host page's stream of it is a 404, in any spelling.
    assert (await sign_in(client, "member@acme.example")).status_code == 303
    for spelled in [theirs["hostId"], *spellings(theirs["hostId"])]:
        r = await client.get(f"/w/{acme.slug}/hosts/{quote(spelled, safe='')}/stream")
        assert r.status_code == 404, r.text[:300]
        assert "theirs" not in r.text
