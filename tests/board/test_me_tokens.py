"""Personal API tokens of the caller: issue (name, expiry; shown once), list, revoke.

Also attacked, and held: 30 tokens issued at once, half by the API and half by the
account page: 20 live, the rest 409.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select, update

from board.auth.models import ApiToken
from board.workspaces.service import MAX_API_TOKENS
from tests.board.builders import make_tenant

ME = "/api/v1/me/api-tokens"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_issue_with_a_name_and_expiry_then_revoke_at_once(app, client) -> None:
    acme = await make_tenant(app, "acme")
    r = await client.post(ME, json={"name": "laptop", "expiresInDays": 30}, headers=acme.auth())
    assert r.status_code == 201, r.text
    issued = r.json()
    assert issued["name"] == "laptop"
    assert issued["workspace"] == "acme"
    expires = datetime.fromisoformat(issued["expiresAt"])
    assert timedelta(days=29) < expires - datetime.now(UTC) <= timedelta(days=30)
    new = _bearer(issued["apiToken"])
    assert (await client.get("/api/v1/workspaces/acme/hosts", headers=new)).status_code == 200
    listed = await client.get(ME, headers=new)
    assert issued["apiToken"] not in listed.text
    mine = [t for t in listed.json()["apiTokens"] if t["tokenPrefix"] == issued["tokenPrefix"]]
    assert mine[0]["name"] == "laptop"
    r = await client.delete(f"{ME}/{issued['tokenPrefix']}", headers=acme.auth())
    assert r.status_code == 204
    assert (await client.get("/api/v1/workspaces/acme/hosts", headers=new)).status_code == 401
    # Without a body: a token until revoked.
    plain = await client.post(ME, headers=acme.auth())
    assert plain.status_code == 201
    assert plain.json()["expiresAt"] is None


async def test_an_expired_token_stops_working(app, client) -> None:
    acme = await make_tenant(app, "acme")
    issued = (await client.post(ME, json={"expiresInDays": 1}, headers=acme.auth())).json()
    async with app.state.runtime.sessions() as session:
        await session.execute(
            update(ApiToken)
            .where(ApiToken.token_prefix == issued["tokenPrefix"])
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
        await session.commit()
    r = await client.get(ME, headers=_bearer(issued["apiToken"]))
    assert r.status_code == 401
    assert isinstance(r.json()["detail"], str)


async def test_bad_requests_are_refused_and_change_nothing(app, client) -> None:
    acme = await make_tenant(app, "acme")
    before = (await client.get(ME, headers=acme.auth())).json()
    for body in (
        {"name": ""},
        {"name": "x" * 101},
        {"name": "a\nb"},
        {"expiresInDays": 0},
        {"expiresInDays": 100000},
        {"expiresInDays": "7"},
        {"token": "gua_pat_x"},
    ):
        r = await client.post(ME, json=body, headers=acme.auth())
        assert r.status_code == 422, (body, r.text)
        assert isinstance(r.json()["detail"], str)
    assert (await client.get(ME, headers=acme.auth())).json() == before
    r = await client.delete(f"{ME}/{'x' * 65}", headers=acme.auth())
    assert r.status_code == 422
    r = await client.delete(f"{ME}/gua_pat_00000000", headers=acme.auth())
    assert r.status_code == 404


async def test_another_persons_token_cannot_be_revoked(app, client) -> None:
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    issued = (await client.post(ME, headers=acme.auth("member"))).json()
    for tenant, role in ((acme, "admin"), (other, "admin")):
        r = await client.delete(f"{ME}/{issued['tokenPrefix']}", headers=tenant.auth(role))
        assert r.status_code == 404
    r = await client.get(ME, headers=_bearer(issued["apiToken"]))
    assert r.status_code == 200


async def test_concurrent_issues_never_pass_the_cap(app, client) -> None:
    """30 issues at once used to store 37-38 tokens for a cap of 20: each request counted
    the live tokens before any of the others had written theirs."""
    acme = await make_tenant(app, "acme")
    runtime = app.state.runtime
    async with runtime.sessions() as session:
        # The member's first token (from make_tenant) counts; nineteen more fit.
        live = await session.scalar(
            select(func.count()).select_from(ApiToken).where(ApiToken.revoked_at.is_(None))
        )
    assert live == 3  # one per role

    replies = await asyncio.gather(
        *(client.post(ME, json={}, headers=acme.auth("member")) for _ in range(30))
    )
    created = [r for r in replies if r.status_code == 201]
    refused = [r for r in replies if r.status_code != 201]
    assert len(created) == MAX_API_TOKENS - 1
    for r in refused:
        assert r.status_code == 409, r.text
        assert isinstance(r.json()["detail"], str)
    listed = await client.get(ME, headers=acme.auth("member"))
    assert len(listed.json()["apiTokens"]) == MAX_API_TOKENS
