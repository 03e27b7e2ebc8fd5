"""What no route should ever see: NUL in a URL, huge bodies before auth, hostile JSON
bodies (deep, huge, not an object, NaN), Host redirects, secrets in log lines."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from board.jsonbodies import TOO_WIDE_DETAIL, has_too_wide_object
from board.logs import RedactSecrets, redact
from tests.board.answers import audit_rows, refused
from tests.board.builders import JSON, make_tenant
from tests.board.db import scalar
from tests.board.reservation_builders import book, busy_host
from tests.board.test_reports_builders import quick_tenant
from tests.web.helpers import sign_in


@pytest.mark.parametrize(
    "path",
    [
        "/w/%00/",
        "/w/acme/hosts/%00",
        "/api/v1/me/api-tokens/%00",
        "/api/v1/workspaces/acme/enrollment-tokens/%00",
        "/api/v1/workspaces/acme/reports/usage?tz=%00&from=2026-01-01&to=2026-01-02",
    ],
)
async def test_nul_in_a_url_is_a_400(app: Any, client: Any, path: str) -> None:
    acme = await make_tenant(app, "acme")
    for method in ("GET", "DELETE", "POST"):
        r = await client.request(method, path, headers=acme.auth())
        assert r.status_code == 400, (method, path, r.text)
        assert isinstance(r.json()["detail"], str)


async def test_a_huge_body_is_refused_before_it_is_read(app: Any, client: Any) -> None:
    limit = app.state.runtime.settings.max_body_bytes
    big = b"[" + b"1," * limit + b"1]"
    # No token at all: refused by size, from Content-Length, before auth or parsing.
    r = await client.post(
        "/api/v1/workspaces/acme/members",
        content=big,
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert str(limit) in r.json()["detail"]

    async def chunks() -> Any:
        for _ in range(4):
            yield b" " * limit

    # Streamed with no Content-Length: refused as soon as it passes the limit.
    r = await client.patch(
        "/api/v1/workspaces/acme/settings",
        content=chunks(),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 413


async def test_the_slash_redirect_is_relative(app: Any, client: Any) -> None:
    await make_tenant(app, "acme")
    await sign_in(client, "admin@acme.example")
    r = await client.get("/w/acme", headers={"Host": "evil.example"})
    assert r.status_code == 307
    assert r.headers["location"] == "/w/acme/"
    r = await client.get("/w/acme/hosts/", headers={"Host": "evil.example"})
    assert "evil.example" not in r.headers.get("location", "")


def test_log_lines_never_carry_a_secret(caplog: pytest.LogCaptureFixture) -> None:
    secret = "gua_agent_1a2b3c4d_" + "x" * 43
    assert secret not in redact(f"< authorization: Bearer {secret}")
    assert "gua_agent_1a2b3c4d" in redact(f"< authorization: Bearer {secret}")
    assert "s3cr3t" not in redact("cookie: gua_session=s3cr3t; theme=dark")
    assert "opaque" not in redact("Authorization: Bearer opaque")
    feed = "gua_cal_0a1b2c3d_" + "y" * 43  # a calendar feed's token, in its URL's query
    assert feed not in redact(f"GET /api/v1/calendar/reservations.ics?token={feed}")
    assert "gua_cal_0a1b2c3d" in redact(f"?token={feed}")
    record = logging.LogRecord("websockets.server", logging.DEBUG, "", 0, "< %s", (secret,), None)
    RedactSecrets().filter(record)
    assert secret not in record.getMessage()


def _booking(unknown_keys: int) -> dict[str, Any]:
    return {
        "hostId": "no-such-host",
        "start": "2030-01-01T10:00:00Z",
        "end": "2030-01-01T11:00:00Z",
        **{f"k{i}": 0 for i in range(unknown_keys)},
    }


@pytest.mark.parametrize("content_type", ["application/json", None])
async def test_a_json_object_of_thousands_of_keys_is_refused_unvalidated(
    app: Any, client: Any, content_type: str | None
) -> None:
    """Was: one validation error per unknown key (~1 KB of the worker each), and a 422 that
    listed all of them: 60,000 keys made a 4 MB answer after a second of CPU."""
    acme = await make_tenant(app, "acme")
    body = json.dumps(_booking(60_000)).encode()
    headers = acme.auth() | ({"Content-Type": content_type} if content_type else {})
    r = await client.post("/api/v1/workspaces/acme/reservations", content=body, headers=headers)
    assert r.status_code == 422, r.text[:300]
    assert r.json()["detail"] == TOO_WIDE_DETAIL
    assert len(r.content) < 1000
    assert await scalar(app, "SELECT count(*) FROM reservations") == 0


async def test_an_api_422_lists_a_few_of_many_problems(app: Any, client: Any) -> None:
    acme = await make_tenant(app, "acme")
    r = await client.post(
        "/api/v1/workspaces/acme/reservations", json=_booking(100), headers=acme.auth()
    )
    assert r.status_code == 422, r.text[:300]
    assert "(and 99 more problem(s))" in r.json()["detail"]
    assert len(r.json()["errors"]) == 20


def test_the_width_check_reads_only_what_it_must() -> None:
    few = json.dumps({f"k{i}": 0 for i in range(4_000)}).encode()  # under the colon gate
    assert not has_too_wide_object(few)
    assert has_too_wide_object(json.dumps({f"k{i}": 0 for i in range(6_000)}).encode())
    wide_but_nested_small = json.dumps([{f"k{i}": 0 for i in range(60)}] * 200).encode()
    assert not has_too_wide_object(wide_but_nested_small)
    assert not has_too_wide_object(b"[" * 100_000 + b'{"a":1}' * 6_000)  # not JSON
    assert not has_too_wide_object(b'{"a":' * 6_000 + b"1" + b"}" * 6_000)  # too deep


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
