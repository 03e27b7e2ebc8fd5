"""Every workspace route, called with another workspace's token and ids (in any spelling,
on the API and the admin page), answers 404; roles below admin cannot call admin routes;
a token of one kind (feed, agent, enrollment, API) opens only its own door."""

from __future__ import annotations

import re
from contextlib import aclosing
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.board.answers import audit_rows, refused
from tests.board.builders import enroll, example, make_tenant, push, retimed, spellings
from tests.board.db import scalar
from tests.board.reservation_builders import book, busy_host, soon
from tests.board.test_reports_builders import quick_tenant
from tests.board.test_reports_params import REPORTS
from tests.web.helpers import admin_browser

QUERY = "?from=2026-11-01&to=2026-11-02"


def _workspace_routes(app) -> list[tuple[str, str]]:
    """Every REST route under a workspace, as the OpenAPI schema lists them."""
    found = []
    for path, operations in app.openapi()["paths"].items():
        if path.startswith("/api/v1/workspaces/{slug}"):
            for method in sorted(operations):
                found.append((method.upper(), path))
    return found


def _fill(path: str, slug: str, ids: dict[str, str]) -> str:
    path = path.replace("{slug}", slug)
    return re.sub(r"\{(\w+)\}", lambda m: ids.get(m.group(1), "x"), path)


async def test_other_workspaces_routes_answer_404(app, client) -> None:
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    host = await enroll(client, acme, "secret-host")
    await push(client, host["agentToken"], retimed(example("observation-1.8.0-fake.json")))
    issued = await client.post(
        "/api/v1/workspaces/acme/enrollment-tokens", json={}, headers=acme.auth()
    )
    ids = {"host_id": host["hostId"], "token_prefix": issued.json()["tokenPrefix"]}
    routes = _workspace_routes(app)
    assert len(routes) >= 8  # hosts, revoke, tokens, settings, members … and whatever is added

    for role in ("admin", "member", "finance"):
        for method, path in routes:
            url = _fill(path, "acme", ids) + (QUERY if method == "GET" else "")
            r = await client.request(method, url, headers=other.auth(role), json={})
            assert r.status_code == 404, (role, method, path, r.status_code, r.text)
            assert isinstance(r.json()["detail"], str)
            assert "secret-host" not in r.text
            assert "alice" not in r.text

    # Their own slug with acme's ids: never acme's data.
    for method, path in routes:
        if method == "DELETE" or "revoke" in path or path.endswith(("/stream", "/stream/fleet")):
            continue  # the SSE streams of one's own workspace never end; 404 for others above
        url = _fill(path, "other", ids) + (QUERY if method == "GET" else "")
        r = await client.request(method, url, headers=other.auth("admin"), json={})
        assert r.status_code in (200, 201, 404, 422), (method, path, r.status_code)
        assert "secret-host" not in r.text
        assert host["hostId"] not in r.text or r.status_code == 404
        if "{host_id}" in path:
            assert r.status_code == 404, (method, path)

    # acme's host is untouched (not revoked by anyone else).
    shown = await client.get(f"/api/v1/workspaces/acme/hosts/{host['hostId']}", headers=acme.auth())
    assert shown.json()["revokedAt"] is None
    tokens = await client.get("/api/v1/workspaces/acme/enrollment-tokens", headers=acme.auth())
    assert tokens.json()["enrollmentTokens"][0]["state"] == "active"


async def test_no_token_is_401(app, client) -> None:
    await make_tenant(app, "acme")
    for method, path in _workspace_routes(app):
        r = await client.request(method, _fill(path, "acme", {}) + QUERY)
        assert r.status_code == 401, (method, path)
        assert isinstance(r.json()["detail"], str)


async def test_members_and_finance_cannot_administer(app, client) -> None:
    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme)
    for role in ("member", "finance"):
        h = acme.auth(role)
        assert (
            await client.post(f"/api/v1/workspaces/acme/hosts/{host['hostId']}/revoke", headers=h)
        ).status_code == 403
        assert (
            await client.get("/api/v1/workspaces/acme/enrollment-tokens", headers=h)
        ).status_code == 403
        assert (
            await client.patch(
                "/api/v1/workspaces/acme/settings", json={"retentionDays": 9}, headers=h
            )
        ).status_code == 403
        assert (
            await client.post(
                "/api/v1/workspaces/acme/members",
                json={"email": "x@y.z", "role": "admin"},
                headers=h,
            )
        ).status_code == 403
        assert (await client.get("/api/v1/workspaces/acme/settings", headers=h)).status_code == 200
    assert (await client.get("/api/v1/workspaces/acme/settings", headers=acme.auth())).json()[
        "retentionDays"
    ] == 400


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


async def test_another_workspaces_tokens_and_hosts_are_404_on_the_admin_page(
    app: Any, client: httpx.AsyncClient
) -> None:
    a = await make_tenant(app, "hpa")
    b_ws = await make_tenant(app, "hpb")
    b_host = str((await enroll(client, b_ws, "b-node"))["hostId"])
    issued = await client.post(
        f"/api/v1/workspaces/{b_ws.slug}/enrollment-tokens",
        json={"displayName": "b-pending"},
        headers=b_ws.auth(),
    )
    b_prefix = issued.json()["tokenPrefix"]
    b, csrf = await admin_browser(app, a)
    before = await audit_rows(app, b_ws.slug) + await audit_rows(app, a.slug)
    async with aclosing(b):
        for path in (
            f"/w/{a.slug}/admin/enrollment-tokens/{b_prefix}/revoke",
            f"/w/{a.slug}/admin/hosts/{b_host}/revoke",
            f"/w/{a.slug}/admin/hosts/{b_host.upper()}/revoke",
            f"/w/{b_ws.slug}/admin/enrollment-tokens/{b_prefix}/revoke",
            f"/w/{b_ws.slug}/admin/hosts/{b_host}/revoke",
        ):
            r = await b.post(path, data={"csrf_token": csrf})
            assert r.status_code == 404, (path, r.status_code)
    for spelled in (b_host, b_host.upper()):
        r = await client.post(
            f"/api/v1/workspaces/{a.slug}/hosts/{spelled}/revoke", headers=a.auth()
        )
        refused(r, 404)
    r = await client.delete(
        f"/api/v1/workspaces/{a.slug}/enrollment-tokens/{b_prefix}", headers=a.auth()
    )
    refused(r, 404)
    after = await audit_rows(app, b_ws.slug) + await audit_rows(app, a.slug)
    assert after == before, await scalar(
        app, "SELECT string_agg(action || ' ' || coalesce(target, ''), ', ') FROM audit_events"
    )
    listed = await client.get(
        f"/api/v1/workspaces/{b_ws.slug}/enrollment-tokens", headers=b_ws.auth()
    )
    assert [t["state"] for t in listed.json()["enrollmentTokens"]].count("active") == 1
    got = await client.get(f"/api/v1/workspaces/{b_ws.slug}/hosts/{b_host}", headers=b_ws.auth())
    assert got.json()["revokedAt"] is None, got.text


async def test_each_kind_of_token_opens_only_its_own_door(app: Any, client: Any) -> None:
    """A calendar feed token, an agent token and an enrollment token as an API bearer,
    an API token as a feed token or an agent's: each is refused, with a sentence."""
    acme = await make_tenant(app, "acme")
    await make_tenant(app, "bravo")
    host = await enroll(client, acme, "node-a")
    issued = await client.post(
        "/api/v1/workspaces/acme/enrollment-tokens", json={}, headers=acme.auth()
    )
    enrollment = issued.json()["enrollmentToken"]
    feed = await client.post("/api/v1/workspaces/acme/calendar-feed", headers=acme.auth())
    feed_token = parse_qs(urlsplit(feed.json()["feedUrl"]).query)["token"][0]
    pat = acme.admin_token
    for token in (feed_token, host["agentToken"], enrollment):
        for path in ("/api/v1/workspaces/acme/hosts", "/api/v1/me/api-tokens"):
            r = await client.get(path, headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 401, (token[:12], path, r.status_code)
            assert isinstance(r.json()["detail"], str)
    for token in (pat, host["agentToken"], enrollment):
        r = await client.get("/api/v1/calendar/reservations.ics", params={"token": token})
        assert r.status_code == 404, (token[:12], r.status_code)
    for token in (pat, feed_token, enrollment):
        r = await client.post(
            "/agent/v1/observations",
            content=b"{}",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        assert r.status_code == 401, (token[:12], r.status_code)
    # acme's API token on bravo's routes: 404, as if bravo did not exist.
    r = await client.get("/api/v1/workspaces/bravo/notification-channels", headers=acme.auth())
    assert r.status_code == 404
    # A rotated feed token stops at once; the new one works.
    again = await client.post("/api/v1/workspaces/acme/calendar-feed", headers=acme.auth())
    assert again.status_code == 201
    old = await client.get("/api/v1/calendar/reservations.ics", params={"token": feed_token})
    assert old.status_code == 404
    new_token = parse_qs(urlsplit(again.json()["feedUrl"]).query)["token"][0]
    fresh = await client.get("/api/v1/calendar/reservations.ics", params={"token": new_token})
    assert fresh.status_code == 200
