"""Lookups by a global secret or slug go through routing_keys (board/auth/routing.py).

Each route is written with the row it routes and dropped when that row is revoked,
rotated or deleted; a key with no route does not get in, and a route only ever opens
the rows of the workspace it names (the tenant query filters on it).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg
import pytest
from fastapi import FastAPI

from board.auth import routing, tokens
from board.errors import Conflict, NotFound, Unauthorized
from board.runtime import Runtime
from board.workspaces import service as workspaces
from tests.board.builders import enroll, example, make_tenant, push, retimed
from tests.board.db import execute, rows, scalar

ME = "/api/v1/me/api-tokens"
FEED = "/api/v1/calendar/reservations.ics"


async def _routes(app: Any, kind: str) -> dict[bytes, int]:
    found = await rows(app, "SELECT key, workspace_id FROM routing_keys WHERE kind = %s", kind)
    return {bytes(key): int(ws) for key, ws in found}


async def _workspace_id(app: Any, slug: str) -> int:
    return int(await scalar(app, "SELECT id FROM workspaces WHERE slug = %s", slug))


async def _fresh(app: FastAPI, token: str) -> bool:
    """Whether the agent token gets in, looked up now (not from the cache)."""
    runtime: Runtime = app.state.runtime
    try:
        await runtime.access.authenticate(f"Bearer {token}", fresh=True)
    except Unauthorized:
        return False
    return True


async def test_agent_tokens_are_routed_from_claim_to_revocation(app, client) -> None:
    acme = await make_tenant(app, "acme")
    acme_id = await _workspace_id(app, "acme")
    host = await enroll(client, acme, "a1")
    digest = tokens.digest(host["agentToken"])
    assert (await _routes(app, routing.AGENT_TOKEN))[digest] == acme_id
    # The enrollment token was used once: it routes nowhere now.
    assert await _routes(app, routing.ENROLLMENT_TOKEN) == {}
    assert await _fresh(app, host["agentToken"])

    r = await client.post(
        f"/api/v1/workspaces/acme/hosts/{host['hostId']}/revoke", headers=acme.auth()
    )
    assert r.status_code == 200, r.text
    assert digest not in await _routes(app, routing.AGENT_TOKEN)
    assert not await _fresh(app, host["agentToken"])


async def test_an_agent_token_without_its_route_does_not_get_in(app, client) -> None:
    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme, "a1")
    body = retimed(example("observation-1.8.0-fake.json"))
    await execute(
        app,
        "DELETE FROM routing_keys WHERE kind = 'agent_token' AND key = %s",
        tokens.digest(host["agentToken"]),
    )
    runtime: Runtime = app.state.runtime
    runtime.access.cache.clear()  # a cache miss: the lookup that reads the route
    assert not await _fresh(app, host["agentToken"])
    assert (await push(client, host["agentToken"], body)).status_code == 401


async def test_a_route_opens_only_the_workspace_it_names(app, client) -> None:
    """Pointed at another workspace, a token finds nothing there: the tenant query is
    filtered by the routed workspace, never by the secret alone."""
    acme = await make_tenant(app, "acme")
    await make_tenant(app, "other")
    other_id = await _workspace_id(app, "other")
    host = await enroll(client, acme, "a1")
    await execute(
        app,
        "UPDATE routing_keys SET workspace_id = %s WHERE key = %s",
        other_id,
        tokens.digest(host["agentToken"]),
    )
    assert not await _fresh(app, host["agentToken"])

    issued = (await client.post(ME, headers=acme.auth("member"))).json()
    await execute(
        app,
        "UPDATE routing_keys SET workspace_id = %s WHERE key = %s",
        other_id,
        tokens.digest(issued["apiToken"]),
    )
    bearer = {"Authorization": f"Bearer {issued['apiToken']}"}
    for slug in ("acme", "other"):
        r = await client.get(f"/api/v1/workspaces/{slug}/hosts", headers=bearer)
        assert r.status_code == 401, r.text


async def test_api_tokens_are_routed_while_they_live(app, client) -> None:
    acme = await make_tenant(app, "acme")
    acme_id = await _workspace_id(app, "acme")
    issued = (await client.post(ME, headers=acme.auth("member"))).json()
    digest = tokens.digest(issued["apiToken"])
    assert (await _routes(app, routing.API_TOKEN))[digest] == acme_id
    bearer = {"Authorization": f"Bearer {issued['apiToken']}"}
    assert (await client.get("/api/v1/workspaces/acme/hosts", headers=bearer)).status_code == 200

    await execute(app, "DELETE FROM routing_keys WHERE key = %s", digest)
    assert (await client.get("/api/v1/workspaces/acme/hosts", headers=bearer)).status_code == 401
    await execute(
        app,
        "INSERT INTO routing_keys (kind, key, workspace_id) VALUES ('api_token', %s, %s)",
        digest,
        acme_id,
    )
    assert (await client.get("/api/v1/workspaces/acme/hosts", headers=bearer)).status_code == 200

    r = await client.delete(f"{ME}/{issued['tokenPrefix']}", headers=acme.auth("member"))
    assert r.status_code == 204
    assert digest not in await _routes(app, routing.API_TOKEN)


async def test_removing_a_member_drops_the_routes_of_their_tokens(app, client) -> None:
    acme = await make_tenant(app, "acme")
    issued = (await client.post(ME, headers=acme.auth("member"))).json()
    r = await client.delete(
        "/api/v1/workspaces/acme/members/member@acme.example", headers=acme.auth()
    )
    assert r.status_code in (200, 204), r.text
    routes = await _routes(app, routing.API_TOKEN)
    assert tokens.digest(issued["apiToken"]) not in routes
    assert tokens.digest(acme.member_token) not in routes
    # Everything left routed is a live token.
    live = await rows(app, "SELECT token_hash FROM api_tokens WHERE revoked_at IS NULL")
    assert set(routes) == {bytes(h) for (h,) in live}


async def test_enrollment_tokens_are_routed_until_claimed_or_revoked(app, client) -> None:
    acme = await make_tenant(app, "acme")
    base = "/api/v1/workspaces/acme/enrollment-tokens"
    kept = (await client.post(base, json={}, headers=acme.auth())).json()
    revoked = (await client.post(base, json={}, headers=acme.auth())).json()
    routes = await _routes(app, routing.ENROLLMENT_TOKEN)
    assert set(routes) == {
        tokens.digest(kept["enrollmentToken"]),
        tokens.digest(revoked["enrollmentToken"]),
    }
    r = await client.delete(f"{base}/{revoked['tokenPrefix']}", headers=acme.auth())
    assert r.status_code == 200
    assert set(await _routes(app, routing.ENROLLMENT_TOKEN)) == {
        tokens.digest(kept["enrollmentToken"])
    }

    # Without its route a live token cannot be claimed.
    await execute(app, "DELETE FROM routing_keys WHERE kind = 'enrollment_token'")
    claim = {"enrollmentToken": kept["enrollmentToken"], "hostname": "h", "agentVersion": "1.8.0"}
    r = await client.post("/agent/v1/enrollments/claim", json=claim)
    assert r.status_code == 401
    assert await scalar(app, "SELECT count(*) FROM hosts") == 0


async def test_calendar_feed_tokens_follow_issue_rotation_and_revocation(app, client) -> None:
    acme = await make_tenant(app, "acme")
    url = "/api/v1/workspaces/acme/calendar-feed"

    def secret(issued: httpx.Response) -> str:
        return parse_qs(urlsplit(issued.json()["feedUrl"]).query)["token"][0]

    first = secret(await client.post(url, headers=acme.auth("member")))
    assert set(await _routes(app, routing.CALENDAR_FEED_TOKEN)) == {tokens.digest(first)}
    assert (await client.get(FEED, params={"token": first})).status_code == 200

    second = secret(await client.post(url, headers=acme.auth("member")))
    assert set(await _routes(app, routing.CALENDAR_FEED_TOKEN)) == {tokens.digest(second)}
    assert (await client.get(FEED, params={"token": first})).status_code == 404
    assert (await client.get(FEED, params={"token": second})).status_code == 200

    await execute(app, "DELETE FROM routing_keys WHERE kind = 'calendar_feed_token'")
    assert (await client.get(FEED, params={"token": second})).status_code == 404
    await execute(
        app,
        "INSERT INTO routing_keys (kind, key, workspace_id) VALUES ('calendar_feed_token', %s, %s)",
        tokens.digest(second),
        await _workspace_id(app, "acme"),
    )
    assert (await client.get(FEED, params={"token": second})).status_code == 200

    assert (await client.delete(url, headers=acme.auth("member"))).status_code in (200, 204)
    assert await _routes(app, routing.CALENDAR_FEED_TOKEN) == {}


async def test_slugs_are_routed_and_unique_through_their_route(app, client) -> None:
    acme = await make_tenant(app, "acme")
    acme_id = await _workspace_id(app, "acme")
    assert (await _routes(app, routing.WORKSPACE_SLUG))[b"acme"] == acme_id
    with pytest.raises(Conflict):
        await make_tenant(app, "acme")
    assert await scalar(app, "SELECT count(*) FROM workspaces WHERE slug = 'acme'") == 1

    # A person's pages and the CLI name the workspace by its slug: read through the route.
    runtime: Runtime = app.state.runtime
    async with runtime.sessions() as session:
        assert (await workspaces.get_workspace(session, "acme")).id == acme_id
    await execute(app, "DELETE FROM routing_keys WHERE kind = 'workspace_slug'")
    async with runtime.sessions() as session:
        with pytest.raises(NotFound):
            await workspaces.get_workspace(session, "acme")
    # An API token routes by itself; the URL's slug must still be its workspace's.
    r = await client.get("/api/v1/workspaces/acme/hosts", headers=acme.auth())
    assert r.status_code == 200


async def test_two_workspaces_cannot_register_the_same_secret(app, client) -> None:
    acme = await make_tenant(app, "acme")
    await make_tenant(app, "other")
    other_id = await _workspace_id(app, "other")
    host = await enroll(client, acme, "a1")
    digest = tokens.digest(host["agentToken"])
    with pytest.raises(psycopg.errors.UniqueViolation):
        await execute(
            app,
            "INSERT INTO routing_keys (kind, key, workspace_id) VALUES ('agent_token', %s, %s)",
            digest,
            other_id,
        )
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        with pytest.raises(Conflict):
            await routing.add(conn, routing.AGENT_TOKEN, digest, other_id)
    # Within its workspace the tenant table holds it unique too.
    with pytest.raises(psycopg.errors.UniqueViolation):
        await execute(
            app,
            "INSERT INTO hosts (workspace_id, public_id, display_name, agent_token_hash, "
            "agent_token_prefix) SELECT workspace_id, gen_random_uuid(), 'twin', "
            "agent_token_hash, 'x' FROM hosts WHERE agent_token_hash = %s",
            digest,
        )
