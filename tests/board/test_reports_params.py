"""Report parameters: every bad value is a 422 whose detail says why (bounds at the edges
of time, odd ISO forms and digits, zones that are folders or files of the zone database,
odd groupings and formats); a bound the params accept keeps every day step inside
Python's dates; DST days are right."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from board.db.urls import libpq_url
from tests.board.answers import refused
from tests.board.builders import enroll, push
from tests.board.money_builders import base
from tests.board.test_reports_builders import (
    days_ago_midnight,
    gpu,
    observation,
    quick_tenant,
    report,
    workspace_id,
)

OK = {"from": "2026-11-01", "to": "2026-11-02"}


@pytest.mark.parametrize(
    ("kind", "params", "reason"),
    [
        ("usage", {"from": "2026-13-01", "to": "2026-11-02"}, "not a real date"),
        ("usage", {"from": "yesterday", "to": "2026-11-02"}, "neither a date"),
        ("usage", {"from": "2026-11-01T10:30:00Z", "to": "2026-11-02"}, "not on a whole hour"),
        ("usage", {"from": "2026-11-01T10:00:00.5Z", "to": "2026-11-02"}, "not on a whole hour"),
        ("usage", {"from": "2026-11-01T10:00:00", "to": "2026-11-02"}, "no UTC offset"),
        ("usage", {"from": "2026-11-02", "to": "2026-11-01"}, "must be after from"),
        ("usage", {"from": "2026-11-01", "to": "2026-11-01"}, "must be after from"),
        ("usage", {"from": "2025-01-01", "to": "2026-03-01"}, "at most 400 days"),
        ("usage", {"to": "2026-11-01"}, "from is required"),
        ("usage", {"from": "2026-11-01"}, "to is required"),
        ("usage", {**OK, "groupBy": "project"}, "groupBy 'project' is unknown"),
        ("usage", {**OK, "groupBy": "user,user"}, "names a key twice"),
        ("usage", {**OK, "groupBy": "user,host,day"}, "at most two keys"),
        ("usage", {**OK, "tz": "Mars/Olympus_Mons"}, "not an IANA time zone"),
        ("usage", {**OK, "tz": "../../etc/passwd"}, "not an IANA time zone"),
        ("usage", {**OK, "format": "xml"}, "format 'xml' is unknown"),
        ("utilization", {**OK, "groupBy": "user"}, "groupBy 'user' is unknown"),
        ("utilization", {**OK, "bucket": "week"}, "bucket 'week' is unknown"),
        ("utilization", {"from": "2026-11-01", "to": "2028-01-01"}, "at most 400 days"),
        ("utilization", {**OK, "tz": "Nowhere/Land"}, "not an IANA time zone"),
    ],
)
async def test_bad_parameters_are_422_with_a_reason(app, client, kind, params, reason) -> None:
    tenant = await quick_tenant(app)
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/{kind}", params=params, headers=tenant.auth()
    )
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str)
    assert reason in detail


async def test_accepted_forms_of_from_and_to(app, client) -> None:
    tenant = await quick_tenant(app)
    for start, end in [
        ("2026-11-01T05:00:00Z", "2026-11-01T07:00:00+00:00"),
        ("2026-11-01T06:00:00+01:00", "2026-11-01T07:00Z"),
        ("2026-11-01T06:00+01:00", "2026-11-01 08:00:00+00:00"),
    ]:
        body = await report(client, tenant, "usage", **{"from": start, "to": end})
        assert body["from"] == "2026-11-01T05:00:00+00:00"
    # "+01:00" that was not percent-encoded arrives as a space.
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/usage?from=2026-11-01T06:00:00+01:00"
        "&to=2026-11-02",
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    # A window of exactly 400 days is allowed, also across DST changes in the zone.
    await report(
        client, tenant, "usage", **{"from": "2026-01-01", "to": "2027-02-05", "tz": "Europe/Berlin"}
    )


async def _seed_hours(app: Any, client: Any, first: datetime, count: int) -> Any:
    """One GPU covered for every UTC hour in [first, first + count h): 1 h each, held by dana."""
    tenant = await quick_tenant(app)
    host = await enroll(client, tenant)
    r = await push(client, host["agentToken"], observation(days_ago_midnight(1), [gpu(0)]))
    assert r.status_code == 202
    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url) as conn:
        ws = await workspace_id(conn, tenant.slug)
        cur = await conn.execute("SELECT id, host_id FROM gpus WHERE workspace_id = %s", [ws])
        gpu_id, host_id = (await cur.fetchone()) or (0, 0)
        hours = [first + timedelta(hours=i) for i in range(count)]
        await conn.execute(
            """
            INSERT INTO gpu_hour_rollups (workspace_id, gpu_id, hour_start, host_id, covered_us,
                active_us, idle_held_us, idle_us, util_pct_us, memory_used_mb_us,
                memory_total_mb_us, sample_count)
            SELECT %s, %s, h, %s, 3600000000, 3600000000, 0, 0, 50 * 3600000000::bigint,
                   0, 3600000000, 120
            FROM unnest(%s::timestamptz[]) AS h
            """,
            [ws, gpu_id, host_id, hours],
        )
        await conn.execute(
            """
            INSERT INTO user_hour_rollups (workspace_id, gpu_id, linux_user, hour_start, host_id,
                held_us, active_us, idle_held_us)
            SELECT %s, %s, 'dana', h, %s, 3600000000, 3600000000, 0
            FROM unnest(%s::timestamptz[]) AS h
            """,
            [ws, gpu_id, host_id, hours],
        )
        await conn.commit()
    return tenant


async def test_day_buckets_follow_dst_in_the_zone(app, client) -> None:
    # 2026-03-08 (23 h) and 2026-11-01 (25 h) in America/New_York; seed 2026-03-07..03-10
    # and 2026-10-31..11-03 in UTC hours, every hour covered.
    spring = await _seed_hours(app, client, datetime(2026, 3, 7, tzinfo=UTC), 4 * 24)
    body = await report(
        client,
        spring,
        "usage",
        **{"from": "2026-03-08", "to": "2026-03-10", "groupBy": "day", "tz": "America/New_York"},
    )
    assert [(r["day"], r["heldGpuHours"]) for r in body["rows"]] == [
        ("2026-03-08", 23.0),
        ("2026-03-09", 24.0),
    ]
    assert body["from"] == "2026-03-08T00:00:00-05:00"
    assert body["to"] == "2026-03-10T00:00:00-04:00"

    autumn = await _seed_hours(app, client, datetime(2026, 10, 31, tzinfo=UTC), 4 * 24)
    util = await report(
        client,
        autumn,
        "utilization",
        **{"from": "2026-11-01", "to": "2026-11-03", "bucket": "day", "tz": "America/New_York"},
    )
    assert [(r["bucketStart"], r["coveredHours"], r["avgUtilPct"]) for r in util["rows"]] == [
        ("2026-11-01T00:00:00-04:00", 25.0, 50.0),
        ("2026-11-02T00:00:00-05:00", 24.0, 50.0),
    ]
    hourly = await report(
        client,
        autumn,
        "utilization",
        **{
            "from": "2026-11-01T05:00:00Z",
            "to": "2026-11-01T07:00:00Z",
            "bucket": "hour",
            "tz": "America/New_York",
        },
    )
    # The repeated 01:00 local hour: two buckets, in time order.
    assert [r["bucketStart"] for r in hourly["rows"]] == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:00:00-05:00",
    ]


REPORTS = ("reports/usage", "reports/utilization", "reports/focus", "reports/reservations")


EDGE_WINDOWS = [
    "from=0001-01-01&to=0001-01-02&tz=Asia/Tokyo",  # year 1 midnight in +09 is year 0
    "from=0001-01-01&to=0001-01-02",
    "from=0001-01-01T00:00:00%2B05:00&to=0001-01-02",
    "from=9999-12-30&to=9999-12-31",
    "from=9999-12-30&to=9999-12-31&tz=America/New_York",
    "from=9999-12-30T00:00:00Z&to=9999-12-31T23:00:00-05:00",  # year 10000 in UTC
    "from=1969-12-31&to=1970-01-02",
]


async def test_report_bounds_at_the_edges_of_time_are_422(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 500 (OverflowError) in every report: now a 422 naming the range."""
    tenant = await quick_tenant(app, "edge")
    base = f"/api/v1/workspaces/{tenant.slug}"
    for window in EDGE_WINDOWS:
        for path in REPORTS:
            for extra in ("", "&format=csv", "&bucket=hour&groupBy=gpu", "&groupBy=day"):
                if extra and path.endswith("focus"):
                    continue
                if "bucket" in extra and not path.endswith("utilization"):
                    continue
                r = await client.get(f"{base}/{path}?{window}{extra}", headers=tenant.auth())
                detail = refused(r, 422)
                assert "out of range" in detail, detail


async def test_report_windows_just_inside_the_range_answer(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "edge")
    base = f"/api/v1/workspaces/{tenant.slug}"
    for window in ("from=1970-01-01&to=1970-01-02", "from=8999-12-31&to=9000-01-01"):
        for path in REPORTS:
            for extra in ("", "&format=csv"):
                r = await client.get(f"{base}/{path}?{window}{extra}", headers=tenant.auth())
                assert r.status_code == 200, (path, window, r.text[:300])


ODD_REPORT_QUERIES = [
    ("tz=America", 422),  # a folder of the zone database
    ("tz=zone.tab", 422),  # a file of it that is no zone
    ("tz=../../../etc/passwd", 422),
    ("tz=/etc/localtime", 422),
    ("tz=UTC%0A", 422),
    ("tz=%ED%A0%80", 422),  # a lone surrogate, UTF-8 encoded
    ("tz=%zz", 422),  # invalid percent-encoding
    ("tz=" + "A" * 10_000, 422),
    ("tz=%00", 400),
    ("groupBy=,", 422),
    ("groupBy=user,", 422),
    ("groupBy=day,day", 422),
    ("format=" + "x" * 10_000, 422),
]


async def test_odd_report_queries_are_refused_with_a_sentence(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "odd")
    base = f"/api/v1/workspaces/{tenant.slug}"
    window = "from=2026-01-01&to=2026-01-02"
    for query, status in ODD_REPORT_QUERIES:
        for path in REPORTS:
            if path.endswith("focus") and query.startswith(("groupBy", "format")):
                continue  # FOCUS takes neither
            r = await client.get(f"{base}/{path}?{window}&{query}", headers=tenant.auth())
            refused(r, status)
    for bad in (
        "from=%D9%A2%D9%A0%D9%A2%D9%A6-01-01&to=2026-01-02",  # Arabic-Indic digits
        "from=%EF%BC%92%EF%BC%90%EF%BC%92%EF%BC%96-01-01&to=2026-01-02",  # full-width
        "from=1e309&to=2026-01-02",
        "from=-0&to=2026-01-02",
        "from=2026-02-30&to=2026-03-02",
        "from=2026-01-01T00:00:00%2B99:00&to=2026-01-02",
        "from=2026-01-02&to=2026-01-01",  # reversed
        "from=&to=",
        "from=" + "9" * 10_000 + "&to=2026-01-02",
    ):
        for path in REPORTS:
            refused(await client.get(f"{base}/{path}?{bad}", headers=tenant.auth()), 422)
    # A repeated parameter: the last one counts, as everywhere in FastAPI.
    r = await client.get(
        f"{base}/reports/usage?from=2025-01-01&from=2026-01-01&to=2026-01-02",
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    assert r.json()["from"].startswith("2026-01-01"), r.text


async def test_no_date_in_a_report_overflows_the_day_arithmetic() -> None:
    """The bounds the params accept keep every day step inside Python's dates: at the
    range's ends, in the zones furthest from UTC, a window is read or refused (never an
    OverflowError)."""
    from board.errors import Unprocessable
    from board.reportkit.params import EARLIEST, LATEST, parse_window

    for tz in ("Pacific/Kiritimati", "Etc/GMT+12", "UTC"):
        for start, end in (
            (EARLIEST, EARLIEST + timedelta(days=2)),
            (LATEST - timedelta(days=2), LATEST),
        ):
            for first, last in ((start, end), (start.date(), end.date())):
                try:
                    window = parse_window(first.isoformat(), last.isoformat(), tz)
                except Unprocessable:
                    continue
                assert window.changes
                assert window.local(window.end).date() + timedelta(days=40) > date(1970, 1, 1)


GPU_TIME_REPORTS = ("reports/usage", "reports/utilization", "reports/focus")


ACCEPTED_BOUNDS = [
    # offsets at the ends of the real range, minutes spelled or not, a space for T
    ("2026-11-01T14:00:00%2B14:00", "2026-11-02T00:00:00Z"),
    ("2026-11-01T00:00:00-12:00", "2026-11-03T00:00:00Z"),
    ("2026-11-01T06%2B01", "2026-11-02T00Z"),
    ("2026-11-01 06:00:00Z", "2026-11-02T00:00:00.000000Z"),
    ("2026-11-01T07:00:00 01:00", "2026-11-02"),  # an unencoded +
    ("2026-11-01T06:00:00-00:00", "2026-11-02"),
]


REFUSED_BOUNDS = [
    "2026-W44-7",  # ISO week date
    "2026-305",  # ordinal date
    "20261101",  # basic format
    "2026-11-01T24:00:00Z",
    "2026-11-01T23:59:60Z",  # a leap second
    "2026-11-01T06:00:00%2B24:00",
    "2026-11-01T06:00:00%2B14:60",  # was read as +15:00
    "2026-11-01T06:00:00-00:60",  # was read as -01:00
    "2026-11-01T06:00:00%2B2400",
    "2026-11-01T06:00:00%2B05:30",  # whole minutes, not on a UTC hour
    "2026-11-01T06:00:00.5Z",
    "2026-11-01T%D9%A0%D9%A6:00:00Z",  # Arabic-Indic hour
    "%EF%BC%92026-11-01",  # one full-width digit
    "2026-11-01T06:00:00Z%00",
    "2026-11-01T06:00:00ZZ",
    "2026-11-01TT06:00:00Z",
    "%2B2026-11-01",
    "2026-11-01T06:00:00%2B01:00:00",  # an offset with seconds
]


async def test_odd_iso_forms_answer_or_are_refused_with_a_sentence(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "iso")
    for start, end in ACCEPTED_BOUNDS:
        for path in GPU_TIME_REPORTS:
            r = await client.get(
                f"{base(tenant)}/{path}?from={start}&to={end}&tz=UTC", headers=tenant.auth()
            )
            assert r.status_code == 200, (path, start, end, r.text[:300])
    for bad in REFUSED_BOUNDS:
        for path in GPU_TIME_REPORTS:
            for side in (f"from={bad}&to=2026-11-03", f"from=2026-10-30&to={bad}"):
                r = await client.get(f"{base(tenant)}/{path}?{side}", headers=tenant.auth())
                refused(r, 400, 422)
