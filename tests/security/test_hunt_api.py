"""The REST API under hostile input, beyond the route sweeps: odd query strings, hostile
JSON bodies, odd spellings of ids, roles below admin, and names we control reaching CSV,
FOCUS and iCalendar output.

Each request here either holds (a 4xx with a JSON string `detail`, nothing changed, no
token in the answer) or was a bug found by this file and fixed in board/: a bound in year
1 or 9999 (500 OverflowError), a reversed reservation range (500 from PostgreSQL), a zone
that is a folder of the zone database (500 IsADirectoryError), a Linux user with a
trailing newline (stored), an enrollment name with NUL (500), and an id spelled
urn:uuid:… echoed and audited as spelled.

In process (the app and a real PostgreSQL), not the served board: these are many small
requests, and none of them depends on the HTTP server.
"""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.board.answers import audit_rows, refused
from tests.board.builders import Tenant, enroll, push
from tests.board.db import scalar
from tests.board.test_reports_builders import gpu, observation, proc, quick_tenant

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
REPORTS = ("reports/usage", "reports/utilization", "reports/focus", "reports/reservations")
JSON = {"Content-Type": "application/json"}


async def busy_host(app: Any, client: httpx.AsyncClient, tenant: Tenant, name: str) -> str:
    """A host with one credited minute of `alice` on GPU-0; its public id."""
    host = await enroll(client, tenant, name)
    at = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
    for i in range(2):
        body = observation(
            at + timedelta(minutes=i), [gpu(0, util=50, state="active", procs=[proc("alice")])]
        )
        r = await push(client, host["agentToken"], body)
        assert r.status_code == 202, r.text
    return str(host["hostId"])


def soon(hours: int = 3) -> datetime:
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=hours)


async def book(client: httpx.AsyncClient, tenant: Tenant, host_id: str, **extra: Any) -> str:
    start = soon(extra.pop("in_hours", 3))
    body = {
        "hostId": host_id,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=1)).isoformat(),
        **extra,
    }
    r = await client.post(
        f"/api/v1/workspaces/{tenant.slug}/reservations", json=body, headers=tenant.auth()
    )
    assert r.status_code == 201, r.text
    return str(r.json()["reservationId"])


# ---- query strings --------------------------------------------------------------------


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


async def test_reservation_lists_with_a_reversed_range_are_422(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 500: PostgreSQL refuses tstzrange(lower > upper)."""
    tenant = await quick_tenant(app, "rev")
    base = f"/api/v1/workspaces/{tenant.slug}"
    for query in ("from=2026-01-02&to=2026-01-01", "to=2020-01-01"):
        for path in ("reservations", "reservations.ics"):
            r = await client.get(f"{base}/{path}?{query}", headers=tenant.auth())
            assert "must not be before" in refused(r, 422)
    for query in (
        "from=0001-01-01T00:00:00%2B05:00",
        "from=9999-12-31T23:00:00-05:00",
        "from=1e309",
        "hostId=%00",
        "memberEmail=" + "x" * 400,
        "hostId=" + "x" * 65,
    ):
        for path in ("reservations", "reservations.ics"):
            refused(await client.get(f"{base}/{path}?{query}", headers=tenant.auth()))
    # The same day twice is an empty window, not an error.
    r = await client.get(
        f"{base}/reservations?from=2026-01-01&to=2026-01-01", headers=tenant.auth()
    )
    assert r.status_code == 200, r.text


async def test_page_sizes_and_cursors_of_the_audit_log(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await quick_tenant(app, "page")
    url = f"/api/v1/workspaces/{tenant.slug}/audit-log"
    for query in (
        "limit=0",
        "limit=-1",
        "limit=1000000000000",
        "limit=1e309",
        "limit=%D9%A1",  # an Arabic-Indic one
        "limit=",
        "cursor=-1",
        "cursor=%D9%A1",
        "cursor=99999999999999999999",
        "cursor=" + "1" * 40,
        "from=2026-01-01",  # no offset
        "from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z",
        "from=1e309",
    ):
        refused(await client.get(f"{url}?{query}", headers=tenant.auth()), 422)
    for query in ("from=0001-01-01T00:00:00%2B05:00", "to=9999-12-31T23:00:00-05:00", "limit=500"):
        r = await client.get(f"{url}?{query}", headers=tenant.auth())
        assert r.status_code == 200, (query, r.text[:300])


# ---- JSON bodies ----------------------------------------------------------------------

HOSTILE_BODIES: list[bytes] = [
    b"[" * 10_000 + b"]" * 10_000,
    b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
    b"[]",
    b'"x"',
    b"1",
    b"\xff\xfe{",
    b'{"x": NaN}',
    b'{"x": Infinity}',
    b'{"x": 1180591620717411303424}',
    json.dumps({"x": "\u0000" + "y" * 1_000_000}).encode(),
    json.dumps({"x": list(range(100_000))}).encode(),
    b"{",
]


async def test_hostile_json_bodies_change_nothing(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await quick_tenant(app, "json")
    host_id = await busy_host(app, client, tenant, "json-node")
    booked = await book(client, tenant, host_id)
    base = f"/api/v1/workspaces/{tenant.slug}"
    routes = [
        ("PATCH", f"{base}/settings"),
        ("PUT", f"{base}/prices"),
        ("POST", f"{base}/members"),
        ("PUT", f"{base}/directory/alice"),
        ("POST", f"{base}/reservations"),
        ("PATCH", f"{base}/reservations/{booked}"),
        ("POST", f"{base}/notification-channels"),
        ("POST", f"{base}/enrollment-tokens"),
        ("POST", "/api/v1/me/api-tokens"),
    ]
    before = await audit_rows(app, tenant.slug)
    settings = (await client.get(f"{base}/settings", headers=tenant.auth())).json()
    for method, url in routes:
        for body in HOSTILE_BODIES:
            r = await client.request(method, url, content=body, headers={**tenant.auth(), **JSON})
            refused(r)
        # The right JSON under the wrong media type is not read as JSON.
        r = await client.request(
            method, url, content=b"{}", headers={**tenant.auth(), "Content-Type": "text/plain"}
        )
        assert r.status_code != 500, r.text
    assert await audit_rows(app, tenant.slug) == before
    assert (await client.get(f"{base}/settings", headers=tenant.auth())).json() == settings


SETTINGS_REFUSED: list[bytes] = [
    b'{"timezone": "America"}',  # was a 500: IsADirectoryError
    b'{"timezone": "America/"}',
    b'{"timezone": "' + b"A" * 5000 + b'"}',  # was a 500: file name too long
    b'{"timezone": "UTC", "timezone": "Europe"}',  # the last one counts
    b'{"timezone": ""}',
    b'{"timezone": "\\ud800"}',
    b'{"timezone": "Europe/Berlin\\u0000"}',
    b'{"timezone": null}',
    b'{"maxSampleGapSeconds": NaN}',
    b'{"maxSampleGapSeconds": 1e309}',
    b'{"maxSampleGapSeconds": 1180591620717411303424}',
    b'{"maxSampleGapSeconds": 60.0}',
    b'{"maxSampleGapSeconds": "60"}',
    b'{"maxSampleGapSeconds": true}',
    b'{"digestHour": -0.0}',
]


async def test_settings_refuse_zone_folders_and_odd_numbers(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "zone")
    url = f"/api/v1/workspaces/{tenant.slug}/settings"
    before = (await client.get(url, headers=tenant.auth())).json()
    for body in SETTINGS_REFUSED:
        refused(await client.patch(url, content=body, headers={**tenant.auth(), **JSON}), 422)
    assert (await client.get(url, headers=tenant.auth())).json() == before
    # -0 is a whole number, and zero in JSON.
    r = await client.patch(url, content=b'{"digestHour": -0}', headers={**tenant.auth(), **JSON})
    assert r.status_code == 200, r.text
    assert r.json()["digestHour"] == 0, r.text


async def test_prices_refuse_odd_numbers(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await quick_tenant(app, "price")
    url = f"/api/v1/workspaces/{tenant.slug}/prices"

    def one(per_hour: str, day: str = "2030-01-01", currency: str = '"EUR"') -> bytes:
        return (
            f'{{"currency": {currency}, "prices": [{{"gpuModel": "*", '
            f'"perGpuHour": {per_hour}, "from": "{day}"}}]}}'
        ).encode()

    for body in (
        one("NaN"),
        one('"NaN"'),
        one("Infinity"),
        one("1e309"),
        one("1180591620717411303424"),
        one("-1"),
        one('"1e-7"'),
        one("1", "0001-01-01"),
        one("1", "9999-12-31"),
        one("1", currency='"\\u0000"'),
        one("1", currency='"eur"'),
        one("1", currency='"' + "E" * 1000 + '"'),
    ):
        refused(await client.put(url, content=body, headers={**tenant.auth(), **JSON}), 422)
    r = await client.get(url, headers=tenant.auth())
    assert r.json()["currency"] is None, r.text
    assert r.json()["prices"] == [], r.text


async def test_enrollment_names_with_nul_are_422(app: Any, client: httpx.AsyncClient) -> None:
    """Was a 500: PostgreSQL text cannot hold NUL."""
    tenant = await quick_tenant(app, "enr")
    url = f"/api/v1/workspaces/{tenant.slug}/enrollment-tokens"
    before = await scalar(app, "SELECT count(*) FROM enrollment_tokens")
    for name in ("a\u0000b", "\u0000", "x" * 256):
        refused(await client.post(url, json={"displayName": name}, headers=tenant.auth()), 422)
    for body in (
        b'{"displayName": "\\ud800"}',
        b'{"expiresInHours": NaN}',
        b'{"expiresInHours": 0}',
    ):
        refused(await client.post(url, content=body, headers={**tenant.auth(), **JSON}), 422)
    assert await scalar(app, "SELECT count(*) FROM enrollment_tokens") == before


async def test_directory_refuses_a_linux_user_with_a_trailing_newline(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was stored: re.match lets "$" match before a final newline."""
    tenant = await quick_tenant(app, "dir")
    base = f"/api/v1/workspaces/{tenant.slug}/directory"
    body = {"memberEmail": None, "team": "ml"}
    for name in ("alice%0A", "alice%0D", "%0A", "-bob", "a" * 65, "%2E%2E", "al%20ice"):
        refused(await client.put(f"{base}/{name}", json=body, headers=tenant.auth()), 404, 422)
    for team in (" \t ", "x\ny", "a\u0000", "t" * 101):
        r = await client.put(
            f"{base}/carol", json={"memberEmail": None, "team": team}, headers=tenant.auth()
        )
        refused(r, 422)
    r = await client.get(base, headers=tenant.auth())
    assert r.json()["entries"] == [], r.text
    # A trailing $ is a real (Samba machine) account name.
    r = await client.put(f"{base}/host01$", json=body, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert r.json()["linuxUser"] == "host01$", r.text


async def test_booking_times_past_year_9999_are_422(app: Any, client: httpx.AsyncClient) -> None:
    """Was a 500 (OverflowError): a whole-minute time whose UTC is in year 10000 or 0."""
    tenant = await quick_tenant(app, "far")
    host_id = await busy_host(app, client, tenant, "far-node")
    booked = await book(client, tenant, host_id)
    base = f"/api/v1/workspaces/{tenant.slug}/reservations"
    start = soon(5).isoformat()
    for body in (
        {"hostId": host_id, "start": start, "end": "9999-12-31T23:00:00-12:00"},
        {"hostId": host_id, "start": "9999-12-31T23:00:00-12:00", "end": start},
        {"hostId": host_id, "start": "0001-01-01T00:00:00+05:00", "end": start},
        {"hostId": host_id, "start": 1e20, "end": 1e21},
        {"hostId": host_id, "start": start, "end": start},
        {"hostId": host_id.upper() + "x", "start": start, "end": start},
    ):
        refused(await client.post(base, json=body, headers=tenant.auth()), 422)
    for patch in (
        {"end": "9999-12-31T23:00:00-12:00"},
        {"start": "0001-01-01T00:00:00+05:00"},
        {"start": "9999-12-31T22:00:00Z", "end": "9999-12-31T23:00:00Z"},
        {"end": "0001-01-01T00:00:00Z"},
        {"start ": start},
    ):
        refused(await client.patch(f"{base}/{booked}", json=patch, headers=tenant.auth()), 422)
    listed = (await client.get(base, headers=tenant.auth())).json()["reservations"]
    assert [b["reservationId"] for b in listed] == [booked]
    assert listed[0]["end"] == (soon(3) + timedelta(hours=1)).isoformat()


# ---- ids ------------------------------------------------------------------------------


def spellings(uuid_text: str) -> list[str]:
    return [
        uuid_text.upper(),
        "{" + uuid_text + "}",
        "urn:uuid:" + uuid_text,
        uuid_text.replace("-", ""),
    ]


async def test_odd_spellings_of_ids_are_answered_and_audited_in_canonical_form(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was echoed as spelled: a revoke by urn:uuid:… answered and audited that string."""
    tenant = await quick_tenant(app, "spell")
    host_id = await busy_host(app, client, tenant, "spell-node")
    booked = await book(client, tenant, host_id)
    base = f"/api/v1/workspaces/{tenant.slug}"
    for spelled in spellings(host_id):
        for url in (f"{base}/hosts/{spelled}", f"{base}/hosts/{spelled}/archives"):
            r = await client.get(url, headers=tenant.auth("finance"))
            assert r.status_code == 200, (url, r.text)
            assert r.json()["hostId"] == host_id, r.text
    for spelled in spellings(booked):
        r = await client.get(f"{base}/reservations/{spelled}", headers=tenant.auth())
        assert r.status_code == 200, r.text
        assert r.json()["reservationId"] == booked, r.text
    r = await client.post(f"{base}/hosts/urn:uuid:{host_id.upper()}/revoke", headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert r.json()["hostId"] == host_id, r.text
    target = await scalar(
        app, "SELECT target FROM audit_events WHERE action = 'host.revoked' ORDER BY id DESC"
    )
    assert target == host_id


async def test_other_workspaces_ids_in_every_spelling_are_404(
    app: Any, client: httpx.AsyncClient
) -> None:
    a = await quick_tenant(app, "ida")
    b = await quick_tenant(app, "idb")
    b_host = await busy_host(app, client, b, "b-secret-node")
    b_booking = await book(client, b, b_host, note="b-secret-note")
    base = f"/api/v1/workspaces/{a.slug}"
    before = await audit_rows(app, b.slug)
    for spelled in [b_host, *spellings(b_host)]:
        for method, url in (
            ("GET", f"{base}/hosts/{spelled}"),
            ("GET", f"{base}/hosts/{spelled}/archives"),
            ("POST", f"{base}/hosts/{spelled}/revoke"),
        ):
            r = await client.request(method, url, headers=a.auth())
            refused(r, 404)
            assert "b-secret" not in r.text
    for spelled in [b_booking, *spellings(b_booking)]:
        for method, url in (
            ("GET", f"{base}/reservations/{spelled}"),
            ("PATCH", f"{base}/reservations/{spelled}"),
            ("DELETE", f"{base}/reservations/{spelled}"),
        ):
            kw: dict[str, Any] = {"json": {"note": "moved by A"}} if method == "PATCH" else {}
            r = await client.request(method, url, headers=a.auth(), **kw)
            refused(r, 404)
            assert "b-secret" not in r.text
    for query in (
        f"hostId={b_host}",
        f"hostId={b_host.upper()}",
        f"memberEmail=admin@{b.slug}.example",
    ):
        r = await client.get(f"{base}/reservations?{query}", headers=a.auth())
        assert r.status_code == 200, r.text
        assert r.json()["reservations"] == [], r.text
    # A booking of B's host from A, in any spelling, is refused.
    start = soon(6)
    for spelled in [b_host, *spellings(b_host)]:
        body = {
            "hostId": spelled,
            "start": start.isoformat(),
            "end": (start + timedelta(hours=1)).isoformat(),
        }
        refused(await client.post(f"{base}/reservations", json=body, headers=a.auth()), 422)
    # B's people are nobody in A: not a directory link, not a booking's member.
    b_admin = f"admin@{b.slug}.example"
    r = await client.put(
        f"{base}/directory/alice", json={"memberEmail": b_admin, "team": None}, headers=a.auth()
    )
    refused(r, 422)
    a_host = await busy_host(app, client, a, "a-node")
    body = {
        "hostId": a_host,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=1)).isoformat(),
        "memberEmail": b_admin,
    }
    refused(await client.post(f"{base}/reservations", json=body, headers=a.auth()), 422)
    assert await audit_rows(app, b.slug) == before
    r = await client.get(f"/api/v1/workspaces/{b.slug}/reservations", headers=b.auth())
    assert [x["note"] for x in r.json()["reservations"]] == ["b-secret-note"]


async def test_odd_ids_in_paths_are_refused(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await quick_tenant(app, "path")
    base = f"/api/v1/workspaces/{tenant.slug}"
    odd = ["1", "-1", "0", "99999999999999999999", "%2E%2E", "..%2F..", "%ED%A0%80", "x" * 5000]
    templates = [
        ("GET", f"{base}/hosts/{{}}"),
        ("GET", f"{base}/hosts/{{}}/archives"),
        ("POST", f"{base}/hosts/{{}}/revoke"),
        ("GET", f"{base}/reservations/{{}}"),
        ("DELETE", f"{base}/reservations/{{}}"),
        ("DELETE", f"{base}/notification-channels/{{}}"),
        ("POST", f"{base}/notification-channels/{{}}/test"),
        ("POST", f"{base}/notifications/{{}}/retry"),
        ("DELETE", f"{base}/enrollment-tokens/{{}}"),
        ("DELETE", f"{base}/members/{{}}"),
        ("POST", f"{base}/members/{{}}/sign-out"),
        ("DELETE", "/api/v1/me/api-tokens/{}"),
        ("GET", "/api/v1/workspaces/{}/hosts"),
    ]
    before = await audit_rows(app, tenant.slug)
    for method, template in templates:
        for value in odd:
            r = await client.request(method, template.format(value), headers=tenant.auth())
            refused(r, 404, 405, 422)
    assert await audit_rows(app, tenant.slug) == before


# ---- roles ----------------------------------------------------------------------------


async def test_members_and_finance_cannot_call_admin_routes(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await quick_tenant(app, "role")
    host_id = await busy_host(app, client, tenant, "role-node")
    booked = await book(client, tenant, host_id)
    base = f"/api/v1/workspaces/{tenant.slug}"
    made = await client.post(
        f"{base}/notification-channels",
        json={"kind": "email", "emails": ["ops@role.example"]},
        headers=tenant.auth(),
    )
    assert made.status_code == 201, made.text
    channel = made.json()["channelId"]
    admin_only: list[tuple[str, str, Any]] = [
        ("GET", f"{base}/members", None),
        ("POST", f"{base}/members", {"email": "new@role.example", "role": "admin"}),
        ("DELETE", f"{base}/members/admin@{tenant.slug}.example", None),
        ("POST", f"{base}/members/admin@{tenant.slug}.example/sign-out", None),
        ("PATCH", f"{base}/settings", {"retentionDays": 1}),
        ("PUT", f"{base}/prices", {"currency": "EUR", "prices": []}),
        ("PUT", f"{base}/directory/alice", {"memberEmail": None, "team": "x"}),
        ("GET", f"{base}/enrollment-tokens", None),
        ("POST", f"{base}/enrollment-tokens", {}),
        ("POST", f"{base}/hosts/{host_id}/revoke", None),
        ("GET", f"{base}/notification-channels", None),
        ("POST", f"{base}/notification-channels", {"kind": "email", "emails": ["a@b.example"]}),
        ("DELETE", f"{base}/notification-channels/{channel}", None),
        ("POST", f"{base}/notification-channels/{channel}/test", None),
        ("GET", f"{base}/notifications", None),
        ("POST", f"{base}/notifications/1/retry", None),
        ("GET", f"{base}/audit-log", None),
    ]
    # Bookings are for people who use the GPUs: finance reads them, never makes them.
    finance_refused = [
        *admin_only,
        ("POST", f"{base}/reservations", {"hostId": host_id, "start": "x", "end": "y"}),
        ("PATCH", f"{base}/reservations/{booked}", {"note": "finance"}),
        ("DELETE", f"{base}/reservations/{booked}", None),
        ("GET", f"{base}/stream/latest", None),
    ]
    before = await audit_rows(app, tenant.slug)
    settings = (await client.get(f"{base}/settings", headers=tenant.auth())).json()
    for role, routes in (("member", admin_only), ("finance", finance_refused)):
        for method, url, body in routes:
            kw: dict[str, Any] = {} if body is None else {"json": body}
            r = await client.request(method, url, headers=tenant.auth(role), **kw)
            refused(r, 403)
    assert await audit_rows(app, tenant.slug) == before
    assert (await client.get(f"{base}/settings", headers=tenant.auth())).json() == settings
    r = await client.get(f"{base}/reservations/{booked}", headers=tenant.auth("finance"))
    assert r.status_code == 200, r.text
    assert r.json()["note"] == "", r.text


# ---- outputs: CSV, FOCUS, iCalendar ---------------------------------------------------


def cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def formula_cells(text: str) -> list[str]:
    return [c for row in cells(text) for c in row if c.startswith(FORMULA_STARTS)]


async def test_names_admins_choose_never_start_a_formula(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Team names, price labels, member emails and preset host names reach finance's
    CSV and FOCUS files; each such cell starts with a quote, and JSON keeps them as is."""
    tenant = await quick_tenant(app, "sheet")
    base = f"/api/v1/workspaces/{tenant.slug}"
    issued = await client.post(
        f"{base}/enrollment-tokens", json={"displayName": "@SUM(A1);x,y"}, headers=tenant.auth()
    )
    assert issued.status_code == 201, issued.text
    claimed = await client.post(
        "/agent/v1/enrollments/claim",
        json={"enrollmentToken": issued.json()["enrollmentToken"], "hostname": "plain"},
    )
    assert claimed.status_code == 201, claimed.text
    host = claimed.json()
    at = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
    card = gpu(0, util=50, state="active", procs=[proc("alice")])
    card["name"] = "-GPU+1"
    for i in range(2):
        r = await push(client, host["agentToken"], observation(at + timedelta(minutes=i), [card]))
        assert r.status_code == 202, r.text
    team = '=HYPERLINK("http://x","team")'
    r = await client.put(
        f"{base}/directory/alice", json={"memberEmail": None, "team": team}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    r = await client.put(
        f"{base}/prices",
        json={
            "currency": "EUR",
            "prices": [{"gpuModel": "-GPU+1", "perGpuHour": 2, "from": "2026-01-01"}],
        },
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    evil_email = "=cmd@sheet.example"
    r = await client.post(
        f"{base}/members", json={"email": evil_email, "role": "member"}, headers=tenant.auth()
    )
    assert r.status_code == 201, r.text
    await book(client, tenant, host["hostId"], memberEmail=evil_email, note="+note")
    today = datetime.now(UTC).date()
    window = f"from={today - timedelta(days=1)}&to={today + timedelta(days=2)}"
    csv_urls = [
        *(f"reports/usage?groupBy={g}&format=csv" for g in ("team", "team,user", "gpu", "host")),
        "reports/utilization?groupBy=gpu&format=csv",
        "reports/focus?tz=UTC",
        *(
            f"reports/reservations?groupBy={g}&format=csv"
            for g in ("member", "host", "reservation")
        ),
    ]
    seen: set[str] = set()
    for url in csv_urls:
        r = await client.get(f"{base}/{url}&{window}", headers=tenant.auth("finance"))
        assert r.status_code == 200, (url, r.text[:300])
        assert not formula_cells(r.text), (url, formula_cells(r.text))
        disposition = r.headers["content-disposition"]
        assert re.fullmatch(r'attachment; filename="[a-z0-9-]+\.csv"', disposition), disposition
        seen |= {c for row in cells(r.text) for c in row}
    for name in (team, "@SUM(A1);x,y", "-GPU+1", evil_email):
        assert "'" + name in seen, f"{name!r} never reached a CSV"
    r = await client.get(f"{base}/reports/usage?groupBy=team&{window}", headers=tenant.auth())
    assert [row["team"] for row in r.json()["rows"]] == [team], r.text


async def test_calendar_feed_escapes_names_and_notes(app: Any, client: httpx.AsyncClient) -> None:
    """Newlines, commas, semicolons and backslashes in a host's name or a note stay text:
    no line of the feed is a property the booker wrote."""
    tenant = await quick_tenant(app, "ics")
    base = f"/api/v1/workspaces/{tenant.slug}"
    preset = "node;a,b\r\nX-INJECTED-NAME:1\\"
    issued = await client.post(
        f"{base}/enrollment-tokens", json={"displayName": preset}, headers=tenant.auth()
    )
    claimed = await client.post(
        "/agent/v1/enrollments/claim",
        json={"enrollmentToken": issued.json()["enrollmentToken"], "hostname": "h"},
    )
    host = claimed.json()
    r = await push(client, host["agentToken"], observation(datetime.now(UTC), [gpu(0)]))
    assert r.status_code == 202, r.text
    note = "line one\r\nEND:VEVENT\r\nBEGIN:VEVENT\r\nX-INJECTED-NOTE:1;x,y"
    await book(client, tenant, host["hostId"], note=note)
    feed = await client.post(f"{base}/calendar-feed", headers=tenant.auth("member"))
    secret_path = "/" + feed.json()["feedUrl"].split("/", 3)[3]
    for r in (
        await client.get(f"{base}/reservations.ics", headers=tenant.auth()),
        await client.get(secret_path),
    ):
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/calendar")
        lines = r.text.split("\r\n")
        assert not [x for x in lines if x.startswith("X-INJECTED")], r.text
        assert sum(x == "BEGIN:VEVENT" for x in lines) == 1, r.text
        assert "\n" not in r.text.replace("\r\n", ""), "a bare newline in the feed"
        unfolded = r.text.replace("\r\n ", "")
        assert "X-INJECTED-NAME:1\\\\" in unfolded, unfolded
        assert "\\;a\\,b" in unfolded, unfolded
    # A guessed, repeated or oversized feed token opens nothing.
    for query in (
        "token=gua_cal_00000000_" + "x" * 43,
        "token=" + "x" * 5000,
        "token=%ED%A0%80",
        "",
    ):
        refused(await client.get(f"{secret_path.split('?')[0]}?{query}"), 404, 422)


async def test_no_date_in_a_report_overflows_the_day_arithmetic() -> None:
    """The bounds the params accept keep every day step inside Python's dates: at the
    range's ends, in the zones furthest from UTC, a window is read or refused (never an
    OverflowError)."""
    from board.errors import Unprocessable
    from board.reports.params import EARLIEST, LATEST, parse_window

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


@pytest.mark.parametrize("role", ["member", "finance"])
async def test_reports_answer_other_roles_only_their_own_workspace(
    app: Any, client: httpx.AsyncClient, role: str
) -> None:
    a = await quick_tenant(app, "rep")
    b = await quick_tenant(app, "rep")
    window = "from=2026-01-01&to=2026-01-02"
    for path in REPORTS:
        r = await client.get(f"/api/v1/workspaces/{b.slug}/{path}?{window}", headers=a.auth(role))
        refused(r, 404)


async def test_a_half_hour_zone_does_not_stop_every_workspaces_notices(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was an Unprocessable raised by the digest of a workspace whose admin chose
    Asia/Kolkata: the notices pass stopped there, for every workspace, every pass."""
    from tests.notices.helpers import events, notices_of

    kolkata = await quick_tenant(app, "kolkata")
    other = await quick_tenant(app, "other")
    for tenant, zone in ((kolkata, "Asia/Kolkata"), (other, "UTC")):
        r = await client.patch(
            f"/api/v1/workspaces/{tenant.slug}/settings",
            json={"timezone": zone, "digestHour": 0},
            headers=tenant.auth(),
        )
        assert r.status_code == 200, r.text
    now = datetime.now(UTC).replace(hour=20, minute=0, second=0, microsecond=0)
    passed = await notices_of(app).detect_once(now)
    assert set(passed) >= {kolkata.slug, other.slug}
    digests = [e[2]["data"] for e in await events(app, "digest.daily")]
    assert sorted(d["workspace"]["slug"] for d in digests) == sorted([kolkata.slug, other.slug])
    # Kolkata's yesterday: its local day, the UTC hours that start on it.
    (local,) = [d for d in digests if d["workspace"]["slug"] == kolkata.slug]
    assert (
        local["day"]
        == (now + timedelta(hours=5, minutes=30) - timedelta(days=1)).date().isoformat()
    )


async def test_the_only_admin_cannot_be_demoted_by_a_re_add(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 201: re-adding the only admin as a member left the workspace with no admin
    (and ended the admin's token), which DELETE …/members/{email} refuses with a 409."""
    tenant = await quick_tenant(app, "demote")
    base = f"/api/v1/workspaces/{tenant.slug}"
    admin = f"admin@{tenant.slug}.example"
    for role in ("member", "finance"):
        r = await client.post(
            f"{base}/members",
            json={"email": f" {admin.upper()} ", "role": role},
            headers=tenant.auth(),
        )
        assert "only admin" in refused(r, 409)
    r = await client.get(f"{base}/members", headers=tenant.auth())
    assert r.status_code == 200, r.text  # the admin's token still works
    assert {m["email"]: m["role"] for m in r.json()["members"]}[admin] == "admin"
    # With a second admin, the first may step down.
    second = await client.post(
        f"{base}/members",
        json={"email": f"member@{tenant.slug}.example", "role": "admin"},
        headers=tenant.auth(),
    )
    assert second.status_code == 201, second.text
    r = await client.post(
        f"{base}/members", json={"email": admin, "role": "member"}, headers=tenant.auth()
    )
    assert r.status_code == 201, r.text
    assert r.json()["role"] == "member"


async def test_a_booking_of_a_revoked_host_only_shrinks(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was a 200: a booking of a revoked host could be extended or moved later, while a
    new booking of it is refused; shortening and cancelling still work."""
    tenant = await quick_tenant(app, "revoked")
    host_id = await busy_host(app, client, tenant, "revoked-node")
    booked = await book(client, tenant, host_id)  # soon(3) .. soon(3) + 1 h
    base = f"/api/v1/workspaces/{tenant.slug}"
    r = await client.post(f"{base}/hosts/{host_id}/revoke", headers=tenant.auth())
    assert r.status_code == 200, r.text
    url = f"{base}/reservations/{booked}"
    start = soon(3)
    for patch in (
        {"end": (start + timedelta(hours=2)).isoformat()},
        {"start": (start - timedelta(hours=1)).isoformat()},
        {
            "start": (start + timedelta(hours=5)).isoformat(),
            "end": (start + timedelta(hours=6)).isoformat(),
        },
    ):
        assert "revoked" in refused(await client.patch(url, json=patch, headers=tenant.auth()), 422)
    shorter = (start + timedelta(minutes=30)).isoformat()
    r = await client.patch(url, json={"end": shorter, "note": "half"}, headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert r.json()["end"] == shorter
    r = await client.delete(url, headers=tenant.auth())
    assert r.status_code == 204, r.text


async def test_two_admins_stepping_down_at_once_leave_one(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Each counted the other as the admin who stays; the admins' rows are now locked,
    so the second waits for the first and then sees itself as the last one."""
    import asyncio

    from board.errors import Conflict
    from board.runtime import Runtime
    from board.workspaces import service as workspaces

    tenant = await quick_tenant(app, "race")
    base = f"/api/v1/workspaces/{tenant.slug}"
    second = f"member@{tenant.slug}.example"
    r = await client.post(
        f"{base}/members", json={"email": second, "role": "admin"}, headers=tenant.auth()
    )
    assert r.status_code == 201, r.text
    runtime: Runtime = app.state.runtime

    written = asyncio.Event()

    async def step_down(email: str, hold: asyncio.Event | None) -> None:
        async with runtime.sessions() as session:
            workspace = await workspaces.get_workspace(session, tenant.slug)
            await workspaces.add_member(session, workspace, email, "member", None)
            if hold is not None:
                written.set()  # demoted in this transaction, not committed yet
                await hold.wait()
            await session.commit()

    release = asyncio.Event()
    first = asyncio.create_task(step_down(f"admin@{tenant.slug}.example", release))
    await asyncio.wait_for(written.wait(), timeout=60)
    deadline = asyncio.get_running_loop().time() + 60
    later = asyncio.create_task(step_down(second, None))
    while not later.done() and not await scalar(
        app,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND datname = current_database()",
    ):
        assert asyncio.get_running_loop().time() < deadline, "the second never waited"
        await asyncio.sleep(0.02)
    release.set()
    await first
    with pytest.raises(Conflict):
        await later
    admins = await scalar(
        app,
        "SELECT count(*) FROM memberships m JOIN workspaces w ON w.id = m.workspace_id "
        "WHERE w.slug = %s AND m.role = 'admin'",
        tenant.slug,
    )
    assert admins == 1
