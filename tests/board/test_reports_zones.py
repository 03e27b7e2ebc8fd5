"""Reports in zones that are not a whole number of hours from UTC (Asia/Kolkata +05:30,
Asia/Kathmandu +05:45, ...): a local day is the UTC hours that start on it. Also zones
that change offset inside the window (a DST gap or fold, a skipped day), and zone names
that are no plain zone (right/…, posix/…, localtime, odd names PostgreSQL may not know).

Rollups are per UTC hour. Before, a date or a day grouping in such a zone was a 422 and the
pages asked for the UTC hour before midnight instead. Now every report answers: the days
tile the window without gaps or overlaps, their sum is the month's total, the JSON, CSV,
FOCUS export and usage page agree, and the answer says how the days were cut.
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import psycopg
import pytest

from board.db.urls import libpq_url
from board.reportkit import params
from board.rollups.daily import refresh_day_rollups
from tests.board.answers import refused
from tests.board.builders import JSON, Tenant, enroll, make_tenant, push
from tests.board.money_builders import base, held_hours
from tests.board.reservation_builders import book_at
from tests.board.test_reports_builders import (
    days_ago_midnight,
    gpu,
    observation,
    quick_tenant,
    report,
    workspace_id,
)
from tests.web.helpers import sign_in

HOUR_US = 3_600_000_000
# A hundredth of an hour: every figure below is a whole number of them, so the reports'
# 6-decimal hours add up exactly and a sum of rows can be compared with a total.
CENTI_US = HOUR_US // 100
# The seeded hours: every UTC hour of 2026-10-29 .. 2026-12-02.
FIRST = datetime(2026, 10, 29, tzinfo=UTC)
HOURS = 35 * 24
USERS = ("dana", "eve")


def held_us(i: int, user: str) -> int:
    """Held time of hour i for a user: differs from hour to hour, so a day moved by one
    hour has other sums."""
    shift = 0 if user == "dana" else 37
    return ((i * 7 + shift) % 50 + 1) * CENTI_US


def expected_days(zone: str, first: date, following: date) -> dict[str, int]:
    """Held µs per local date under the rule, computed here from the seeded hours: each
    UTC hour counts on the local date its start falls on."""
    tz = ZoneInfo(zone)
    days: dict[str, int] = defaultdict(int)
    for i in range(HOURS):
        day = (FIRST + timedelta(hours=i)).astimezone(tz).date()
        if first <= day < following:
            days[day.isoformat()] += sum(held_us(i, u) for u in USERS)
    return dict(days)


async def seeded(app: Any, client: httpx.AsyncClient, tenant: Tenant) -> str:
    """One GPU whose hour rollups cover every seeded hour, held by dana and eve; day rows
    refreshed, so a report reads whole UTC days from them and the rest from hours."""
    host = await enroll(client, tenant)
    r = await push(client, host["agentToken"], observation(days_ago_midnight(1), [gpu(0)]))
    assert r.status_code == 202, r.text
    hours = [FIRST + timedelta(hours=i) for i in range(HOURS)]
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        cur = await conn.execute("SELECT id, host_id FROM gpus WHERE workspace_id = %s", [ws])
        gpu_id, host_id = (await cur.fetchone()) or (0, 0)
        users = [[held_us(i, u) for i in range(HOURS)] for u in USERS]
        held = [sum(per_user) for per_user in zip(*users, strict=True)]
        await conn.execute(
            """
            INSERT INTO gpu_hour_rollups (workspace_id, gpu_id, hour_start, host_id, covered_us,
                active_us, idle_held_us, idle_us, util_pct_us, memory_used_mb_us,
                memory_total_mb_us, sample_count)
            SELECT %s, %s, h, %s, 3600000000, x, 0, 3600000000 - x, 50 * 3600000000::bigint,
                   0, 3600000000, 120
            FROM unnest(%s::timestamptz[], %s::bigint[]) AS s(h, x)
            """,
            [ws, gpu_id, host_id, hours, held],
        )
        for user, per_hour in zip(USERS, users, strict=True):
            await conn.execute(
                """
                INSERT INTO user_hour_rollups (workspace_id, gpu_id, linux_user, hour_start,
                    host_id, held_us, active_us, idle_held_us)
                SELECT %s, %s, %s, h, %s, x, x, 0
                FROM unnest(%s::timestamptz[], %s::bigint[]) AS s(h, x)
                """,
                [ws, gpu_id, user, host_id, hours, per_hour],
            )
        await refresh_day_rollups(conn)
    return str(host["hostId"])


def us(hours: float) -> int:
    return round(hours * 100) * CENTI_US


HALF_HOUR_ZONES = [("Asia/Kolkata", "00:30"), ("Asia/Kathmandu", "00:45")]


@pytest.mark.parametrize(("zone", "begins"), HALF_HOUR_ZONES)
async def test_days_of_a_half_hour_zone_tile_the_month(
    app: Any, client: httpx.AsyncClient, zone: str, begins: str
) -> None:
    tenant = await make_tenant(app, "tiles")
    await seeded(app, client, tenant)
    month = {"from": "2026-11-01", "to": "2026-12-01", "tz": zone}
    expected = expected_days(zone, date(2026, 11, 1), date(2026, 12, 1))
    assert len(expected) == 30

    days = await report(client, tenant, "usage", groupBy="day", **month)
    # The window starts at the first UTC hour of November 1 there, and says so.
    assert datetime.fromisoformat(days["from"]).strftime("%Y-%m-%d %H:%M") == f"2026-11-01 {begins}"
    assert datetime.fromisoformat(days["to"]).strftime("%Y-%m-%d %H:%M") == f"2026-12-01 {begins}"
    assert f"begins at {begins}" in days["hourAlignment"], days["hourAlignment"]
    assert {r["day"]: us(r["heldGpuHours"]) for r in days["rows"]} == expected

    # The days sum to the month's total for the same rows, whatever the grouping.
    total = us(days["totals"]["heldGpuHours"])
    assert sum(expected.values()) == total
    for group in ("user", "gpu", "user,day"):
        other = await report(client, tenant, "usage", groupBy=group, **month)
        assert us(other["totals"]["heldGpuHours"]) == total, group
        assert sum(us(r["heldGpuHours"]) for r in other["rows"]) == total, group

    # One day alone is that day's row.
    single = await report(
        client,
        tenant,
        "usage",
        groupBy="user",
        **{**month, "from": "2026-11-07", "to": "2026-11-08"},
    )
    assert us(single["totals"]["heldGpuHours"]) == expected["2026-11-07"]

    # Daily utilization buckets: the same days, named by their first hour.
    util = await report(client, tenant, "utilization", groupBy="gpu", bucket="day", **month)
    assert [r["bucketStart"][:16] for r in util["rows"]] == [
        f"{d}T{begins}" for d in sorted(expected)
    ]
    assert all(r["coveredHours"] == 24.0 for r in util["rows"])
    assert util["hourAlignment"] == days["hourAlignment"]

    # The CSV has the JSON's rows.
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/usage",
        params={**month, "groupBy": "day", "format": "csv"},
        headers=tenant.auth("finance"),
    )
    assert r.status_code == 200, r.text
    lines = list(csv.DictReader(io.StringIO(r.text)))
    assert {line["day"]: us(float(line["heldGpuHours"])) for line in lines} == expected


@pytest.mark.parametrize(("zone", "begins"), HALF_HOUR_ZONES)
async def test_focus_charges_the_same_days(
    app: Any, client: httpx.AsyncClient, zone: str, begins: str
) -> None:
    tenant = await make_tenant(app, "focusz")
    await seeded(app, client, tenant)
    r = await client.put(
        f"/api/v1/workspaces/{tenant.slug}/prices",
        json={
            "currency": "EUR",
            "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": "2026-01-01"}],
        },
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    month = {"from": "2026-11-01", "to": "2026-12-01", "tz": zone}
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/focus",
        params=month,
        headers=tenant.auth("finance"),
    )
    assert r.status_code == 200, r.text
    rows = list(csv.DictReader(io.StringIO(r.text)))
    tz = ZoneInfo(zone)
    charged: dict[str, Decimal] = defaultdict(Decimal)
    for row in rows:
        start = datetime.fromisoformat(row["ChargePeriodStart"]).astimezone(tz)
        end = datetime.fromisoformat(row["ChargePeriodEnd"]).astimezone(tz)
        assert f"{start:%H:%M}" == f"{end:%H:%M}" == begins, row
        assert (
            datetime.fromisoformat(row["BillingPeriodStart"])
            .astimezone(tz)
            .strftime("%Y-%m-%d %H:%M")
            == f"2026-11-01 {begins}"
        )
        charged[start.date().isoformat()] += Decimal(row["PricingQuantity"])
    expected = expected_days(zone, date(2026, 11, 1), date(2026, 12, 1))
    assert {d: us(float(q)) for d, q in charged.items()} == expected


@pytest.mark.parametrize(("zone", "begins"), HALF_HOUR_ZONES)
async def test_the_usage_page_and_the_api_agree(
    app: Any, client: httpx.AsyncClient, zone: str, begins: str
) -> None:
    """The page asks the report for the dates themselves (no more hour before midnight):
    its CSV is the API's, its day chart has the API's days, and it shows the rule."""
    tenant = await make_tenant(app, "pagez")
    await seeded(app, client, tenant)
    r = await sign_in(client, "admin@pagez.example", "correct-horse-battery")
    assert r.status_code == 303, r.text
    query = {"from": "2026-11-01", "to": "2026-11-08", "groupBy": "day", "tz": zone}
    page_csv = await client.get(f"/w/{tenant.slug}/usage.csv", params=query)
    assert page_csv.status_code == 200, page_csv.text
    assert 'filename="usage-2026-11-01_2026-11-07.csv"' in page_csv.headers["content-disposition"]
    api_csv = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/usage",
        params={**query, "format": "csv"},
        headers=tenant.auth(),
    )
    assert api_csv.status_code == 200, api_csv.text
    assert page_csv.text == api_csv.text

    page = await client.get(
        f"/w/{tenant.slug}/usage",
        params={"from": "2026-11-01", "through": "2026-11-07", "groupBy": "user", "tz": zone},
    )
    assert page.status_code == 200, page.text[:500]
    assert 'id="hour-alignment"' in page.text
    assert f"begins at {begins}" in page.text
    # The day chart: one column per day of the window, the API's days.
    charted = re.findall(r'data-day="([0-9-]+)"', page.text)
    api = await report(client, tenant, "usage", **query)
    assert charted == [r["day"] for r in api["rows"]] == [f"2026-11-0{d}" for d in range(1, 8)]


async def test_reservations_report_cuts_the_same_days(app: Any, client: httpx.AsyncClient) -> None:
    """Reserved time is cut where the days begin (19:00 UTC in Kolkata), so it lands on
    the same days as the hour figures."""
    tenant = await make_tenant(app, "bookz")
    host_id = await seeded(app, client, tenant)
    await book_at(
        app,
        tenant,
        datetime(2026, 10, 20, tzinfo=UTC),
        hostId=host_id,
        gpuUuids=["GPU-0"],
        start="2026-11-03T10:00:00Z",
        end="2026-11-06T10:00:00Z",
    )
    body = await report(
        client,
        tenant,
        "reservations",
        groupBy="day",
        **{"from": "2026-11-01", "to": "2026-12-01", "tz": "Asia/Kolkata"},
    )
    assert "begins at 00:30" in body["hourAlignment"]
    assert [(r["day"], r["reservedGpuHours"]) for r in body["rows"]] == [
        ("2026-11-03", 9.0),  # 10:00 to 19:00 UTC, the day's end at 00:30 on the 4th
        ("2026-11-04", 24.0),
        ("2026-11-05", 24.0),
        ("2026-11-06", 15.0),  # from 19:00 UTC on the 5th
    ]
    assert body["totals"]["reservedGpuHours"] == 72.0


async def test_whole_hour_zones_state_no_alignment(app: Any, client: httpx.AsyncClient) -> None:
    """Midnight to midnight where midnight is on a UTC hour, DST days included."""
    tenant = await make_tenant(app, "wholez")
    await seeded(app, client, tenant)
    body = await report(
        client,
        tenant,
        "usage",
        groupBy="day",
        **{"from": "2026-11-01", "to": "2026-11-03", "tz": "America/New_York"},
    )
    assert body["hourAlignment"] is None
    assert body["from"] == "2026-11-01T00:00:00-04:00"
    assert [r["day"] for r in body["rows"]] == ["2026-11-01", "2026-11-02"]
    assert us(body["totals"]["heldGpuHours"]) == sum(
        expected_days("America/New_York", date(2026, 11, 1), date(2026, 11, 3)).values()
    )


ZONES = [
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Australia/Adelaide",
    "Australia/Eucla",
    "Australia/Lord_Howe",
    "America/St_Johns",
    "Asia/Tehran",
    "Pacific/Chatham",
    "Europe/Berlin",
    "America/New_York",
    "America/Santiago",
    "Pacific/Apia",
    "Africa/Monrovia",
]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(
    ("first", "following"), [("2026-01-01", "2027-01-01"), ("1971-01-01", "1972-01-01")]
)
def test_local_days_tile_every_hour(zone: str, first: str, following: str) -> None:
    """Each UTC hour of a year is in exactly one local day: the one its start falls on,
    which begins at its first hour and ends where the next begins."""
    window = params.parse_window(first, following, zone)
    day = window.day_of(window.start)
    assert day.isoformat() == first
    hour = window.start
    while hour < window.end:
        begins = window.day_start(day)
        ends = window.day_start(day + timedelta(days=1))
        if hour == ends:
            day += timedelta(days=1)
            continue
        assert begins <= hour < ends, (zone, day, hour)
        assert window.day_of(hour) == day == window.local(hour).date()
        assert begins.minute == begins.second == 0
        hour += params.HOUR
    assert window.day_start(day + timedelta(days=1)) == window.end
    assert window.last_day().isoformat() < following


GPU_TIME_REPORTS = ("reports/usage", "reports/utilization", "reports/focus")


ZONE_WINDOWS = [
    # (tz, from, to): DST gaps and folds, zones that changed offset or skipped a day
    ("America/New_York", "2026-03-08", "2026-03-09"),  # a 23-hour day
    ("America/New_York", "2026-11-01", "2026-11-02"),  # a 25-hour day
    ("America/New_York", "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z"),  # the fold
    ("America/Santiago", "2026-09-06", "2026-09-07"),  # DST starts at midnight
    ("America/Santiago", "2026-04-04", "2026-04-06"),  # DST ends at midnight
    ("America/Havana", "2026-03-08", "2026-03-09"),
    ("Pacific/Apia", "2011-12-29", "2012-01-01"),  # 2011-12-30 never happened there
    ("Europe/Moscow", "2014-10-25", "2014-10-27"),  # +04 to +03 for good
    ("Pacific/Kiritimati", "2026-11-01", "2026-11-02"),  # +14
    ("Etc/GMT%2B12", "2026-11-01", "2026-11-02"),  # -12
    ("Africa/Casablanca", "2026-02-14", "2026-03-30"),  # Ramadan: the offset changes twice
]


HALF_HOUR_WINDOWS = [
    ("Australia/Lord_Howe", "2026-04-04T00:00:00Z", "2026-04-06T00:00:00Z"),  # 30-min DST
    ("Asia/Kathmandu", "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"),
    ("America/St_Johns", "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"),
    ("Africa/Monrovia", "1971-06-01T00:00:00Z", "1972-06-01T00:00:00Z"),  # -00:44:30 till 1972
]


DAYS = ("groupBy=day", "groupBy=user,day", "groupBy=team,day", "bucket=day", "")


async def test_zones_that_change_offset_in_the_window(app: Any, client: httpx.AsyncClient) -> None:
    """Every day grouping in a zone at a DST gap or fold, one that skipped a day or moved
    for good: a 200; where midnight is not on a UTC hour too, and the answer says how its
    days were cut."""
    tenant = await quick_tenant(app, "zones")
    at = (datetime.now(UTC) - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    await held_hours(client, tenant, at, {"NVIDIA A100": "alice"})
    recent = (at.date().isoformat(), (at + timedelta(days=2)).date().isoformat())
    for zone, start, end in [*ZONE_WINDOWS, ("America/New_York", *recent)]:
        for path in ("reports/usage", "reports/utilization"):
            for extra in DAYS:
                if ("bucket" in extra) != path.endswith("utilization") and extra:
                    continue
                for fmt in ("json", "csv"):
                    url = f"{base(tenant)}/{path}?from={start}&to={end}&tz={zone}&format={fmt}"
                    r = await client.get(f"{url}&{extra}", headers=tenant.auth())
                    assert r.status_code == 200, (zone, path, extra, r.text[:300])
        r = await client.get(
            f"{base(tenant)}/reports/focus?from={start}&to={end}&tz={zone}", headers=tenant.auth()
        )
        assert r.status_code == 200, (zone, r.text[:300])
    for zone, start, end in HALF_HOUR_WINDOWS:
        for path, extra in (
            ("reports/usage", "groupBy=day"),
            ("reports/usage", "groupBy=team,day"),
            ("reports/utilization", "bucket=day"),
            ("reports/focus", ""),
        ):
            url = f"{base(tenant)}/{path}?from={start}&to={end}&tz={zone}&{extra}"
            r = await client.get(url, headers=tenant.auth())
            assert r.status_code == 200, (zone, path, extra, r.text[:300])
            if path != "reports/focus":
                assert "start on it" in r.json()["hourAlignment"], r.text[:300]
        url = f"{base(tenant)}/reports/usage?from={start}&to={end}&tz={zone}&groupBy=user"
        assert (await client.get(url, headers=tenant.auth())).status_code == 200


ODD_ZONES = (
    "right/UTC",
    "right/America/New_York",
    "posix/Europe/Berlin",
    "Factory",
    "localtime",
    "posixrules",
    "EST5EDT",
    "Etc/GMT-14",
    "Etc/GMT%2B12",
    "GMT%2B0",
    "NZ-CHAT",  # +12:45
    "leapseconds",
    "tzdata.zi",
    "right",
    "UTC%20",
    "%20UTC",
    "utc",
    "Europe//Berlin",
    "Europe/./Berlin",
    "./UTC",
)


async def test_odd_zone_names_in_every_report_and_setting(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Names the zone database holds that are no plain zone, or that PostgreSQL may not
    know: an answer or a 4xx with a sentence, in the reports and as the workspace's zone
    (FOCUS's default, statements, prices' dates)."""
    from tests.web.helpers import sign_in

    slug = f"oddzone-{datetime.now(UTC):%H%M%S%f}"
    from board.workspaces import service as workspaces

    async with app.state.runtime.sessions() as session:
        workspace = await workspaces.create_workspace(session, slug, slug)
        admin = await workspaces.add_member(
            session, workspace, f"admin@{slug}.example", "admin", "correct-horse-battery"
        )
        await session.commit()
    tenant = Tenant(slug, admin.api_token, admin.api_token, admin.api_token)
    start = (datetime.now(UTC) - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    await held_hours(client, tenant, start, {"NVIDIA A100": "alice"})
    window = f"from={start:%Y-%m-%dT%H:00:00Z}&to={start + timedelta(hours=3):%Y-%m-%dT%H:00:00Z}"
    dates = f"from={start:%Y-%m-%d}&to={start + timedelta(days=1):%Y-%m-%d}"
    assert (await sign_in(client, f"admin@{slug}.example", "correct-horse-battery")).status_code
    for zone in ODD_ZONES:
        for path, extra in (
            ("reports/usage", "groupBy=user,day"),
            ("reports/usage", "groupBy=team&format=csv"),
            ("reports/utilization", "bucket=day&groupBy=gpu"),
            ("reports/utilization", "bucket=hour&format=csv"),
            ("reports/focus", ""),
        ):
            for bounds in (window, dates):
                r = await client.get(
                    f"{base(tenant)}/{path}?{bounds}&tz={zone}&{extra}", headers=tenant.auth()
                )
                if r.status_code != 200:
                    refused(r, 400, 422)
        r = await client.patch(
            f"{base(tenant)}/settings",
            content=f'{{"timezone": "{zone.replace("%20", " ").replace("%2B", "+")}"}}',
            headers={**tenant.auth(), **JSON},
        )
        if r.status_code != 200:
            refused(r, 400, 422)
            continue
        body = {
            "currency": "EUR",
            "prices": [{"gpuModel": "*", "perGpuHour": 1, "from": f"{start:%Y-%m-%d}"}],
        }
        r = await client.put(f"{base(tenant)}/prices", json=body, headers=tenant.auth())
        if r.status_code != 200:
            refused(r, 400, 409, 422)
        for url in (
            f"{base(tenant)}/reports/focus?{window}",
            f"{base(tenant)}/prices",
            f"/w/{slug}/statements",
            f"/w/{slug}/statements.csv?unassigned=1",
            f"/w/{slug}/usage",
        ):
            r = await client.get(url, headers=tenant.auth() if "/api/" in url else {})
            assert r.status_code < 500, (zone, url, r.text[:300])


NOT_IANA_ZONES = (
    "right/Europe/Berlin",
    "right/UTC",
    "posix/Europe/Berlin",
    "localtime",
    "posixrules",
    "right",
)


async def test_zone_folder_copies_are_no_report_zone(app: Any, client: httpx.AsyncClient) -> None:
    """Were a 200: right/Europe/Berlin is +02:00 in December to Python (its dates, labels
    and day bounds) but 01:59:33 to PostgreSQL (its day keys); posix/... and localtime
    (whatever the server's /etc/localtime is) are no IANA zone either, as the workspace
    setting already says."""
    tenant = await quick_tenant(app, "notiana")
    for zone in NOT_IANA_ZONES:
        for path in GPU_TIME_REPORTS:
            for bounds in (
                "from=2026-12-01&to=2026-12-02",
                "from=2026-12-01T00:00:00Z&to=2026-12-02T00:00:00Z",
            ):
                url = f"{base(tenant)}/{path}?{bounds}&tz={zone}"
                r = await client.get(url, headers=tenant.auth())
                assert "IANA" in refused(r, 422), (zone, path)
