"""Enrollment tokens: single use (also under concurrency), expiry, revocation, no secrets
shown (in lists and in the audit log); odd expiries and names (0 hours, NUL) refused on the
API and on the admin page, issuing nothing."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

import httpx
import pytest

from board.enrollment import service
from board.workspaces.service import get_workspace
from tests.board.answers import TOKEN, audit_rows, refused, token_rows
from tests.board.builders import JSON, make_tenant
from tests.board.db import scalar
from tests.board.test_reports_builders import quick_tenant
from tests.web.helpers import admin_browser


async def _issue(client, tenant, **body):
    r = await client.post(
        f"/api/v1/workspaces/{tenant.slug}/enrollment-tokens", json=body, headers=tenant.auth()
    )
    assert r.status_code == 201, r.text
    return r.json()


async def _claim(client, token, hostname="vm"):
    return await client.post(
        "/agent/v1/enrollments/claim",
        json={"enrollmentToken": token, "hostname": hostname, "agentVersion": "1.8.0"},
    )


async def test_token_shape_and_display_name(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    issued = await _issue(client, tenant, displayName="rack-7")
    assert issued["enrollmentToken"].startswith("gua_enroll_")
    assert issued["enrollmentToken"].startswith(issued["tokenPrefix"])
    assert len(issued["enrollmentToken"]) >= len(issued["tokenPrefix"]) + 43  # 256 bits
    r = await _claim(client, issued["enrollmentToken"])
    assert r.status_code == 201
    assert r.json()["displayName"] == "rack-7"
    stored = await scalar(
        app,
        "SELECT count(*) FROM enrollment_tokens WHERE token_hash = sha256(convert_to(%s, 'UTF8'))",
        issued["enrollmentToken"],
    )
    assert stored == 1  # only the digest is kept
    raw = await scalar(
        app,
        "SELECT count(*) FROM enrollment_tokens WHERE token_prefix = %s "
        "AND position(%s in encode(token_hash, 'escape')) > 0",
        issued["tokenPrefix"],
        issued["enrollmentToken"],
    )
    assert raw == 0


async def test_reused_token_refused(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    issued = await _issue(client, tenant)
    assert (await _claim(client, issued["enrollmentToken"])).status_code == 201
    again = await _claim(client, issued["enrollmentToken"])
    assert again.status_code == 401
    assert isinstance(again.json()["detail"], str)
    assert issued["enrollmentToken"] not in again.text
    assert await scalar(app, "SELECT count(*) FROM hosts") == 1


async def test_unknown_and_blank_tokens(app, client) -> None:
    unknown = await _claim(client, "gua_enroll_deadbeef_nothing")
    assert unknown.status_code == 401
    blank = await _claim(client, "   ")
    assert blank.status_code == 422
    assert isinstance(blank.json()["detail"], str)
    extra = await client.post("/agent/v1/enrollments/claim", json={"enrollmentToken": "x", "a": 1})
    assert extra.status_code == 422
    bad_json = await client.post(
        "/agent/v1/enrollments/claim",
        content=b"{",
        headers={"Content-Type": "application/json"},
    )
    assert bad_json.status_code == 400
    assert await scalar(app, "SELECT count(*) FROM hosts") == 0


async def test_expired_token_refused(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    issued = await _issue(client, tenant, expiresInHours=1)
    await scalar(
        app, "UPDATE enrollment_tokens SET expires_at = now() - interval '1 second' RETURNING 1"
    )
    r = await _claim(client, issued["enrollmentToken"])
    assert r.status_code == 401
    listed = (
        await client.get("/api/v1/workspaces/acme/enrollment-tokens", headers=tenant.auth())
    ).json()
    assert listed["enrollmentTokens"][0]["state"] == "expired"


async def test_revoked_token_refused(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    issued = await _issue(client, tenant)
    r = await client.delete(
        f"/api/v1/workspaces/acme/enrollment-tokens/{issued['tokenPrefix']}", headers=tenant.auth()
    )
    assert r.status_code == 200
    assert r.json()["state"] == "revoked"
    assert (await _claim(client, issued["enrollmentToken"])).status_code == 401
    missing = await client.delete(
        "/api/v1/workspaces/acme/enrollment-tokens/gua_enroll_nothere", headers=tenant.auth()
    )
    assert missing.status_code == 404


async def test_list_never_shows_secrets(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    first = await _issue(client, tenant, displayName="a")
    await _issue(client, tenant)
    claimed = (await _claim(client, first["enrollmentToken"])).json()
    r = await client.get("/api/v1/workspaces/acme/enrollment-tokens", headers=tenant.auth())
    assert r.status_code == 200
    assert first["enrollmentToken"] not in r.text
    states = {t["tokenPrefix"]: t for t in r.json()["enrollmentTokens"]}
    assert states[first["tokenPrefix"]]["state"] == "claimed"
    assert states[first["tokenPrefix"]]["claimedByHostId"] == claimed["hostId"]


@pytest.mark.parametrize(
    "body",
    [{"expiresInHours": 0}, {"expiresInHours": 10000}, {"displayName": "x" * 300}, {"other": 1}],
)
async def test_issue_rejects_bad_parameters(app, client, body) -> None:
    tenant = await make_tenant(app, "acme")
    r = await client.post(
        "/api/v1/workspaces/acme/enrollment-tokens", json=body, headers=tenant.auth()
    )
    assert r.status_code == 422
    assert isinstance(r.json()["detail"], str)


async def test_only_admins_issue(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    for role in ("member", "finance"):
        r = await client.post(
            "/api/v1/workspaces/acme/enrollment-tokens", json={}, headers=tenant.auth(role)
        )
        assert r.status_code == 403


async def test_many_concurrent_claims_one_wins(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    issued = await _issue(client, tenant)
    results = await asyncio.gather(
        *(_claim(client, issued["enrollmentToken"], f"h{i}") for i in range(12))
    )
    codes = sorted(r.status_code for r in results)
    assert codes == [201] + [401] * 11
    assert await scalar(app, "SELECT count(*) FROM hosts") == 1


async def test_wire_shapes_are_unchanged(app, client) -> None:
    """Keys in their order and times as Python writes them (+00:00), as agents and scripts
    have always read them; the read models must not reorder or reformat anything."""
    tenant = await make_tenant(app, "acme")
    issued = await _issue(client, tenant, displayName="rack-7")
    assert list(issued) == ["enrollmentToken", "tokenPrefix", "expiresAt"]
    assert issued["expiresAt"].endswith("+00:00")
    claimed = (await _claim(client, issued["enrollmentToken"])).json()
    assert list(claimed) == ["hostId", "displayName", "agentToken", "tokenPrefix"]
    listed = await client.get("/api/v1/workspaces/acme/enrollment-tokens", headers=tenant.auth())
    assert list(listed.json()) == ["enrollmentTokens"]
    token = listed.json()["enrollmentTokens"][0]
    assert list(token) == [
        "tokenPrefix",
        "displayName",
        "state",
        "createdAt",
        "expiresAt",
        "claimedAt",
        "claimedByHostId",
    ]
    assert all(token[k].endswith("+00:00") for k in ("createdAt", "expiresAt", "claimedAt"))
    second = await _issue(client, tenant)
    revoked = await client.delete(
        f"/api/v1/workspaces/acme/enrollment-tokens/{second['tokenPrefix']}", headers=tenant.auth()
    )
    assert revoked.json() == {"tokenPrefix": second["tokenPrefix"], "state": "revoked"}


async def test_a_secret_is_not_in_the_repr(app) -> None:
    """What a log line or a traceback prints of an issued token never holds the secret."""
    tenant = await make_tenant(app, "acme")
    async with app.state.runtime.sessions() as session:
        workspace = await get_workspace(session, tenant.slug)
        issued = await service.issue(session, workspace.id, display_name=None, expires_in_hours=1)
        await session.rollback()
    assert issued.token.startswith("gua_enroll_")
    assert issued.token not in repr(issued)
    assert issued.prefix in repr(issued)


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


async def test_odd_expiries_on_the_admin_page_issue_nothing(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was 201 for 0 (and -0): the default lifetime, where the API answers 422."""
    tenant = await make_tenant(app, "hpexp")
    b, csrf = await admin_browser(app, tenant)
    before_tokens = await token_rows(app, tenant.slug)
    before_audit = await audit_rows(app, tenant.slug)
    async with aclosing(b):
        for hours in ("0", "-0", "0.0", "0e5", "-1", "nan", "inf", "-inf", "721", "1e308", "x"):
            r = await b.post(
                f"/w/{tenant.slug}/admin/enrollment-tokens",
                data={"csrf_token": csrf, "display_name": "n", "expires_in_hours": hours},
            )
            assert r.status_code == 422, (hours, r.status_code)
            assert not TOKEN.search(r.text), hours
        # The edges that hold: blank is the default, 720 the most.
        for hours in ("", "720", "0.5"):
            r = await b.post(
                f"/w/{tenant.slug}/admin/enrollment-tokens",
                data={"csrf_token": csrf, "display_name": "n", "expires_in_hours": hours},
            )
            assert r.status_code == 201, (hours, r.status_code)
    assert await token_rows(app, tenant.slug) == before_tokens + 3
    assert await audit_rows(app, tenant.slug) == before_audit + 3


async def test_the_api_refuses_odd_expiries(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(app, "apiexp")
    url = f"/api/v1/workspaces/{tenant.slug}/enrollment-tokens"
    before = await token_rows(app, tenant.slug)
    odd: tuple[object, ...] = (0, -1, 720.0001, 1e308, [], "x")
    for hours in odd:
        r = await client.post(url, json={"expiresInHours": hours}, headers=tenant.auth())
        refused(r, 422)
    for raw in ('{"expiresInHours": NaN}', '{"expiresInHours": Infinity}', "[]", '"x"'):
        r = await client.post(
            url, content=raw, headers={**tenant.auth(), "Content-Type": "application/json"}
        )
        refused(r, 422)
    assert await token_rows(app, tenant.slug) == before


async def test_token_lists_and_audit_never_hold_a_secret(
    app: Any, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "nosecret")
    url = f"/api/v1/workspaces/{tenant.slug}/enrollment-tokens"
    secrets = []
    for name in ("plain", "=HYPERLINK(1)", "gua_enroll_deadbeef_" + "A" * 30):
        r = await client.post(url, json={"displayName": name}, headers=tenant.auth())
        assert r.status_code == 201, r.text
        secrets.append(r.json()["enrollmentToken"])
    # A display name that is itself a token's secret is redacted in the log, not stored.
    r = await client.post(url, json={"displayName": secrets[0]}, headers=tenant.auth())
    assert r.status_code == 201, r.text
    secrets.append(r.json()["enrollmentToken"])
    listed = await client.get(url, headers=tenant.auth())
    log = await client.get(f"/api/v1/workspaces/{tenant.slug}/audit-log", headers=tenant.auth())
    b, _ = await admin_browser(app, tenant)
    async with aclosing(b):
        page = await b.get(f"/w/{tenant.slug}/admin")
        audit_page = await b.get(f"/w/{tenant.slug}/admin/audit")
    for secret in secrets[1:]:
        for answer in (listed, log, page, audit_page):
            assert secret not in answer.text, answer.request.url
    assert secrets[0] not in log.text
    assert secrets[0] not in audit_page.text
    # Revoking twice, and revoking a claimed token, change nothing more.
    prefix = listed.json()["enrollmentTokens"][-1]["tokenPrefix"]
    assert secrets[0].startswith(prefix + "_")
    for _ in range(2):
        r = await client.delete(f"{url}/{prefix}", headers=tenant.auth())
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "revoked", r.text
    claimed = await client.post(
        "/agent/v1/enrollments/claim", json={"enrollmentToken": secrets[1], "hostname": "h"}
    )
    assert claimed.status_code == 201, claimed.text
    claimed_prefix = secrets[1][: len(prefix)]
    r = await client.delete(f"{url}/{claimed_prefix}", headers=tenant.auth())
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "claimed", r.text
    # A revoked token is refused at the claim.
    r = await client.post("/agent/v1/enrollments/claim", json={"enrollmentToken": secrets[0]})
    refused(r, 401)
