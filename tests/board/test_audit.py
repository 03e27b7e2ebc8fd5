"""The audit log: every admin action of the API and sign-ins, tenant-isolated, paged."""

from __future__ import annotations

from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
from sqlalchemy import func, select, update

from board.audit.models import AuditEvent
from board.audit.service import clean_detail, delete_expired
from board.settings import Settings
from tests.board.answers import refused
from tests.board.builders import enroll, make_tenant, push
from tests.board.db import scalar
from tests.board.money_builders import prices_body
from tests.board.test_reports_builders import gpu, observation, quick_tenant
from tests.web.helpers import admin_browser, sign_in

LOG = "/api/v1/workspaces/{}/audit-log"


async def _events(client, tenant, **params) -> list[dict]:
    r = await client.get(LOG.format(tenant.slug), headers=tenant.auth(), params=params)
    assert r.status_code == 200, r.text
    return r.json()["events"]


async def test_admin_actions_of_the_api_are_recorded_without_secrets(app, client) -> None:
    acme = await make_tenant(app, "acme")
    api = "/api/v1/workspaces/acme"
    added = await client.post(
        f"{api}/members",
        json={"email": "New@Acme.example", "role": "member", "password": "long-enough-1"},
        headers=acme.auth(),
    )
    assert added.status_code == 201
    regraded = await client.post(
        f"{api}/members", json={"email": "new@acme.example", "role": "finance"}, headers=acme.auth()
    )
    assert regraded.status_code == 201
    r = await client.post(f"{api}/members/new@acme.example/sign-out", headers=acme.auth())
    assert r.status_code == 204
    r = await client.delete(f"{api}/members/new@acme.example", headers=acme.auth())
    assert r.status_code == 204
    r = await client.patch(f"{api}/settings", json={"retentionDays": 30}, headers=acme.auth())
    assert r.status_code == 200
    host = await enroll(client, acme, "gpu-01", displayName="gpu-01")
    issued = await client.post(f"{api}/enrollment-tokens", json={}, headers=acme.auth())
    prefix = issued.json()["tokenPrefix"]
    r = await client.delete(f"{api}/enrollment-tokens/{prefix}", headers=acme.auth())
    assert r.status_code == 200
    r = await client.post(f"{api}/hosts/{host['hostId']}/revoke", headers=acme.auth())
    assert r.status_code == 200
    mine = await client.post("/api/v1/me/api-tokens", json={"name": "ci"}, headers=acme.auth())
    assert mine.status_code == 201
    r = await client.delete(
        f"/api/v1/me/api-tokens/{mine.json()['tokenPrefix']}", headers=acme.auth()
    )
    assert r.status_code == 204

    log = await client.get(LOG.format("acme"), headers=acme.auth())
    events = log.json()["events"]
    actions = [e["action"] for e in reversed(events)]
    assert actions == [
        "member.added",
        "member.role_changed",
        "member.signed_out",
        "member.removed",
        "settings.changed",
        "enrollment_token.issued",  # by enroll()
        "enrollment_token.issued",
        "enrollment_token.revoked",
        "host.revoked",
        "api_token.issued",
        "api_token.revoked",
    ]
    by_action = {e["action"]: e for e in events}
    assert by_action["member.added"]["target"] == "new@acme.example"
    assert by_action["member.added"]["actorEmail"] == "admin@acme.example"
    assert by_action["member.role_changed"]["detail"] == {
        "role": "finance",
        "previousRole": "member",
    }
    assert by_action["settings.changed"]["detail"] == {
        "retention_days": 30,
        "previous_retention_days": 400,
    }
    assert by_action["host.revoked"]["target"] == host["hostId"]
    assert by_action["enrollment_token.revoked"]["target"] == prefix
    assert all(e["clientAddress"] for e in events)
    # Never a secret: not the member's token, the enrollment token, the new API token, or
    # the password.
    for secret in (
        added.json()["apiToken"],
        issued.json()["enrollmentToken"],
        mine.json()["apiToken"],
        "long-enough-1",
        acme.admin_token,
    ):
        assert secret not in log.text


async def test_a_refused_action_leaves_no_entry(app, client) -> None:
    acme = await make_tenant(app, "acme")
    r = await client.post("/api/v1/workspaces/acme/hosts/nope/revoke", headers=acme.auth())
    assert r.status_code == 404
    r = await client.delete(
        "/api/v1/workspaces/acme/members/admin@acme.example", headers=acme.auth()
    )
    assert r.status_code in (204, 409)
    r = await client.patch(
        "/api/v1/workspaces/acme/settings", json={"retentionDays": 0}, headers=acme.auth()
    )
    assert r.status_code == 422
    assert [e["action"] for e in await _events(client, acme)] in ([], ["member.removed"])


async def test_only_admins_of_the_workspace_read_it(app, client) -> None:
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    await client.patch(
        "/api/v1/workspaces/acme/settings", json={"retentionDays": 31}, headers=acme.auth()
    )
    for role in ("member", "finance"):
        r = await client.get(LOG.format("acme"), headers=acme.auth(role))
        assert r.status_code == 403
        assert isinstance(r.json()["detail"], str)
    for role in ("admin", "member", "finance"):
        r = await client.get(LOG.format("acme"), headers=other.auth(role))
        assert r.status_code == 404
        assert "settings.changed" not in r.text
    assert await _events(client, other) == []


async def test_sign_ins_are_recorded_in_each_workspace_of_the_person(app, client) -> None:
    await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    # The acme admin also belongs to "other".
    r = await client.post(
        "/api/v1/workspaces/other/members",
        json={"email": "admin@acme.example", "role": "member"},
        headers=other.auth(),
    )
    assert r.status_code == 201
    stranger = await sign_in(client, "nobody@nowhere.example", "whatever-123")
    assert stranger.status_code == 401
    refused = await sign_in(client, "admin@acme.example", "wrong-password")
    assert refused.status_code == 401
    ok = await sign_in(client, "admin@acme.example")
    assert ok.status_code == 303
    events = await _events(client, other)
    signins = [(e["action"], e["target"]) for e in events if e["action"].startswith("signin")]
    assert signins == [
        ("signin.succeeded", "admin@acme.example"),
        ("signin.failed", "admin@acme.example"),
    ]
    assert "wrong-password" not in str(events)
    assert "nobody@nowhere.example" not in str(events)


async def test_paging_by_cursor_and_time(app, client) -> None:
    acme = await make_tenant(app, "acme")
    for days in range(1, 8):
        r = await client.patch(
            "/api/v1/workspaces/acme/settings", json={"retentionDays": days}, headers=acme.auth()
        )
        assert r.status_code == 200
    seen: list[int] = []
    cursor = None
    while True:
        params = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        page = (await client.get(LOG.format("acme"), headers=acme.auth(), params=params)).json()
        seen += [e["detail"]["retention_days"] for e in page["events"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == [7, 6, 5, 4, 3, 2, 1]
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert await _events(client, acme, **{"from": future}) == []
    assert len(await _events(client, acme, to=future)) == 7


async def test_bad_queries_are_readable_422s(app, client) -> None:
    acme = await make_tenant(app, "acme")
    for params in (
        {"limit": 0},
        {"limit": 100000},
        {"cursor": "abc"},
        {"cursor": "9" * 40},
        {"from": "yesterday"},
        {"from": "2026-12-02T00:00:00"},
        {"from": "2026-12-02T00:00:00Z", "to": "2026-12-01T00:00:00Z"},
    ):
        r = await client.get(LOG.format("acme"), headers=acme.auth(), params=params)
        assert r.status_code == 422, (params, r.text)
        assert isinstance(r.json()["detail"], str)


def test_detail_never_keeps_a_secret() -> None:
    cleaned = clean_detail(
        {
            "password": "hunter2-hunter2",
            "apiToken": "x",
            "tokenPrefix": "gua_pat_0123abcd",
            "clientSecret": "s",
            "note": "gua_pat_0123abcd_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "nested": {"a": 1},
            "role": "admin",
        }
    )
    assert cleaned == {"tokenPrefix": "gua_pat_0123abcd", "note": "[redacted]", "role": "admin"}


async def test_events_older_than_the_retention_are_deleted(app, client, settings) -> None:
    acme = await make_tenant(app, "acme")
    for days in (10, 20):
        await client.patch(
            "/api/v1/workspaces/acme/settings", json={"retentionDays": days}, headers=acme.auth()
        )
    runtime = app.state.runtime
    async with runtime.sessions() as session:
        oldest = min(e["id"] for e in await _events(client, acme))
        await session.execute(
            update(AuditEvent)
            .where(AuditEvent.id == oldest)
            .values(at=datetime.now(UTC) - timedelta(days=21))
        )
        await session.commit()
    assert isinstance(settings, Settings)
    async with await psycopg.AsyncConnection.connect(
        settings.database_url.replace("postgresql+psycopg", "postgresql"), autocommit=True
    ) as conn:
        # The operator's floor set to a day: the workspace's 20 days decide.
        assert await delete_expired(conn, min_days=1) == 1
        assert await delete_expired(conn, min_days=1) == 0
    assert [e["detail"] for e in await _events(client, acme)] == [
        {"retention_days": 20, "previous_retention_days": 10}
    ]


async def test_entries_written_by_domain_services_say_from_where(app, client) -> None:
    """prices.put, directory.put, the calendar feed and bookings for a member were written
    without a client address: the context every request builds now carries it."""
    acme = await make_tenant(app, "acme")
    api = "/api/v1/workspaces/acme"
    host = await enroll(client, acme, "gpu-01", displayName="gpu-01")
    pushed = await push(client, host["agentToken"], observation(datetime.now(UTC), [gpu(0)]))
    assert pushed.status_code == 202
    today = datetime.now(UTC).date()
    r = await client.put(f"{api}/prices", json=prices_body(today), headers=acme.auth())
    assert r.status_code == 200, r.text
    r = await client.put(
        f"{api}/directory/alice",
        json={"memberEmail": "member@acme.example", "team": "vision"},
        headers=acme.auth(),
    )
    assert r.status_code == 200, r.text
    r = await client.post(f"{api}/calendar-feed", headers=acme.auth())
    assert r.status_code == 201, r.text
    r = await client.delete(f"{api}/calendar-feed", headers=acme.auth())
    assert r.status_code == 204, r.text
    start = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(hours=1)
    r = await client.post(
        f"{api}/reservations",
        json={
            "hostId": host["hostId"],
            "start": start.isoformat(),
            "end": (start + timedelta(hours=2)).isoformat(),
            "memberEmail": "member@acme.example",
        },
        headers=acme.auth(),
    )
    assert r.status_code == 201, r.text
    booking = f"{api}/reservations/{r.json()['reservationId']}"
    r = await client.patch(booking, json={"note": "moved"}, headers=acme.auth())
    assert r.status_code == 200, r.text
    assert (await client.delete(booking, headers=acme.auth())).status_code == 204

    events = await _events(client, acme)
    addresses = {e["action"]: e["clientAddress"] for e in events}
    for action in (
        "prices.put",
        "directory.put",
        "calendar_feed.issued",
        "calendar_feed.revoked",
        "reservation.create_for_member",
        "reservation.update_for_member",
        "reservation.cancel_for_member",
    ):
        assert addresses.get(action) == "127.0.0.1", (action, addresses)
    # And no entry of any kind, in any workspace, lacks one.
    async with app.state.runtime.sessions() as session:
        nameless = await session.scalar(
            select(func.count()).select_from(AuditEvent).where(AuditEvent.client_address.is_(None))
        )
    assert nameless == 0


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


async def test_audit_cursors_and_filters_stay_in_their_workspace(
    app: Any, client: httpx.AsyncClient
) -> None:
    a = await make_tenant(app, "aua")
    b = await make_tenant(app, "aub")
    await client.post(
        f"/api/v1/workspaces/{b.slug}/enrollment-tokens",
        json={"displayName": "b-secret-name"},
        headers=b.auth(),
    )
    newest_b = await scalar(app, "SELECT max(id) FROM audit_events")
    base = f"/api/v1/workspaces/{a.slug}/audit-log"
    for query in (
        f"cursor={int(newest_b) + 1}",
        "cursor=9223372036854775807",
        "limit=500&from=0001-01-01T00:00Z&to=9999-12-31T23:59Z",
    ):
        r = await client.get(f"{base}?{query}", headers=a.auth())
        assert r.status_code == 200, (query, r.text)
        assert "b-secret-name" not in r.text, query
        assert b.slug not in r.text, query
    for query in (
        "cursor=9223372036854775808",
        "cursor=99999999999999999999",
        "cursor=-1",
        "cursor=%EF%BC%91",
        "cursor=" + "1" * 40,
        "limit=0",
        "limit=501",
        "from=2026-01-01T00:00",
        "from=2026-01-02T00:00Z&to=2026-01-01T00:00Z",
        "from=x",
    ):
        r = await client.get(f"{base}?{query}", headers=a.auth())
        refused(r, 422)
    for role in ("member", "finance"):
        refused(await client.get(base, headers=a.auth(role)), 403)
    refused(await client.get(f"/api/v1/workspaces/{b.slug}/audit-log", headers=a.auth()), 404)
    browser_a, _ = await admin_browser(app, a)
    async with aclosing(browser_a):
        for cursor in ("9223372036854775808", "x", "-1", "1" * 40):
            r = await browser_a.get(f"/w/{a.slug}/admin/audit?cursor={cursor}")
            assert r.status_code == 422, (cursor, r.status_code)
        r = await browser_a.get(f"/w/{a.slug}/admin/audit?cursor={int(newest_b) + 1}")
        assert r.status_code == 200
        assert "b-secret-name" not in r.text
