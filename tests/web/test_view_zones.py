"""The fleet, people, host and usage pages in zones that are not whole hours from UTC,
that skip a midnight or sit by the date line: each view answers, a week starts on the
zone's Monday, a day is the zone's day, and the usage page's bounds hold at the edges
of the calendar.

In process (the app and a real PostgreSQL).
"""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from board.reportkit.params import day_now
from tests.board.answers import refused
from tests.board.builders import Tenant, enroll, make_tenant, push
from tests.board.test_reports_builders import gpu, observation, proc
from tests.web.helpers import encoded, sign_in

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


@pytest.mark.parametrize(
    "query",
    [
        "through=9999-12-31",
        "from=9999-12-01&through=9999-12-31",
        "to=0001-01-01",
        "from=0001-01-01&to=0001-01-01",
        "through=0001-01-01",
        "to=9999-12-31&through=9999-12-31",
    ],
)
async def test_usage_bounds_at_the_edges_of_the_calendar(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str], query: str
) -> None:
    tenant, _ = fleet
    # The CSV reads `to`, not the form's `through`.
    for path in ("usage", "usage.csv") if "to=" in query else ("usage",):
        r = await client.get(f"/w/{tenant.slug}/{path}?{query}")
        assert r.status_code == 422, (path, query, r.status_code, r.text[:300])


ODD_ZONES = (
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Pacific/Kiritimati",
    "America/St_Johns",
    "America/Santiago",
)


@pytest.mark.parametrize("zone", ODD_ZONES)
async def test_every_view_in_an_odd_zone(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str], zone: str
) -> None:
    tenant, host_id = fleet
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings", json={"timezone": zone}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    base = f"/w/{tenant.slug}"
    paths = [
        "/",
        "/fleet.json",
        "/people",
        "/people?sort=hours",
        "/usage",
        "/usage?groupBy=day",
        "/usage?groupBy=user,day",
        "/usage.csv",
        "/usage.csv?groupBy=day",
        f"/hosts/{host_id}.json",
        *(f"/hosts/{host_id}?range={key}" for key in ("6h", "24h", "7d", "30d")),
    ]
    for path in paths:
        r = await client.get(base + path)
        # Local days of a half-hour zone are the UTC hours that start on them (reports.md).
        assert r.status_code == 200, (zone, path, r.text[:500])


@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "Pacific/Pago_Pago", "Asia/Kathmandu"])
async def test_the_people_week_starts_on_the_zones_monday(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str], zone: str
) -> None:
    """Fourteen hours ahead of UTC and eleven behind, the week is the zone's own."""
    from zoneinfo import ZoneInfo

    from board.reportkit.params import day_now

    tenant, _ = fleet
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings", json={"timezone": zone}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text

    def monday() -> str:
        today = day_now(ZoneInfo(zone))  # the local date the current UTC hour starts on
        return (today - timedelta(days=today.weekday())).isoformat()

    before = monday()
    r = await client.get(f"/w/{tenant.slug}/people")
    after = monday()
    assert r.status_code == 200, r.text
    assert f"GPU-hours since {before}" in r.text or f"GPU-hours since {after}" in r.text
    assert "a_b" in r.text
    assert "axb" in r.text


SKIPPED_MIDNIGHTS = [
    ("America/Santiago", "2026-09-06"),
    ("America/Havana", "2026-03-08"),
    ("Asia/Beirut", "2026-03-29"),
    ("America/Santiago", "2026-04-05"),  # the hour before it comes twice
]


@pytest.mark.parametrize(("zone", "day"), SKIPPED_MIDNIGHTS)
async def test_usage_around_a_day_whose_midnight_is_skipped(
    client: httpx.AsyncClient, fleet: tuple[Tenant, str], zone: str, day: str
) -> None:
    from datetime import date

    tenant, _ = fleet
    first = date.fromisoformat(day) - timedelta(days=3)
    last = date.fromisoformat(day) + timedelta(days=3)
    for start, through in ((first, last), (date.fromisoformat(day), last), (first, first)):
        end = through + timedelta(days=1)
        tz = encoded(zone)
        for path in (
            f"/w/{tenant.slug}/usage?from={start}&through={through}&tz={tz}&groupBy=day",
            f"/w/{tenant.slug}/usage?from={start}&through={through}&tz={tz}",
            f"/w/{tenant.slug}/usage.csv?from={start}&to={end}&tz={tz}&groupBy=day",
            f"/api/v1/workspaces/{tenant.slug}/reports/usage?from={start}&to={end}&tz={tz}",
        ):
            r = await client.get(path, headers=tenant.auth())
            assert r.status_code == 200, (path, r.status_code, r.text[:400])
