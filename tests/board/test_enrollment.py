"""Enrollment tokens: single use (also under concurrency), expiry, revocation, no secrets shown."""

from __future__ import annotations

import asyncio

import pytest

from board.enrollment import service
from board.workspaces.service import get_workspace
from tests.board.builders import make_tenant
from tests.board.db import scalar


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
