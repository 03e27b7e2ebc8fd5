"""Channels' limits hold under concurrent requests: at most MAX_CHANNELS per workspace,
and test notices limited per channel and per workspace (a 429 with a sentence and
Retry-After, from the API and from the admin page's form), each workspace on its own."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from board.notices.service import MAX_CHANNELS, TESTS_PER_CHANNEL, TESTS_PER_WORKSPACE
from tests.board.builders import Tenant, make_tenant
from tests.board.db import execute, scalar
from tests.notices.helpers import add_channel
from tests.web.helpers import csrf_of, sign_in

CHANNELS = "/api/v1/workspaces/{slug}/notification-channels"


async def _live_channels(app: Any, slug: str) -> int:
    return int(
        await scalar(
            app,
            "SELECT count(*) FROM notice_channels c JOIN workspaces w ON w.id = c.workspace_id "
            "WHERE w.slug = %s AND c.deleted_at IS NULL",
            slug,
        )
    )


async def _test_events(app: Any) -> int:
    return int(await scalar(app, "SELECT count(*) FROM notice_events WHERE type = 'test'"))


async def _send_test(client: httpx.AsyncClient, tenant: Tenant, channel: str) -> httpx.Response:
    return await client.post(
        f"{CHANNELS.format(slug=tenant.slug)}/{channel}/test", headers=tenant.auth()
    )


def _assert_refused_politely(r: httpx.Response) -> None:
    assert r.status_code == 429, r.text
    assert isinstance(r.json()["detail"], str)
    assert int(r.headers["Retry-After"]) >= 1


async def test_the_channel_cap_holds_under_concurrent_creations(app, client) -> None:
    acme = await make_tenant(app, "acme")
    ws = await scalar(app, "SELECT id FROM workspaces WHERE slug = 'acme'")
    await execute(
        app,
        "INSERT INTO notice_channels (workspace_id, public_id, kind, emails, events) "
        "SELECT %s, gen_random_uuid(), 'email', ARRAY['ops@acme.example'], "
        "ARRAY['host.stale'] FROM generate_series(1, %s)",
        ws,
        MAX_CHANNELS - 15,
    )
    url = CHANNELS.format(slug="acme")
    body = {"kind": "email", "emails": ["ops@acme.example"]}
    answers = await asyncio.gather(
        *(client.post(url, json=body, headers=acme.auth()) for _ in range(30))
    )
    made = [r for r in answers if r.status_code == 201]
    refused = [r for r in answers if r.status_code != 201]
    assert len(made) == 15
    assert {r.status_code for r in refused} == {409}
    assert all(isinstance(r.json()["detail"], str) for r in refused)
    assert await _live_channels(app, "acme") == MAX_CHANNELS


async def test_test_notices_are_limited_per_channel(app, client) -> None:
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    first = (await add_channel(client, acme, kind="email", emails=["a@acme.example"]))["channelId"]
    second = (await add_channel(client, acme, kind="email", emails=["b@acme.example"]))["channelId"]
    theirs = (await add_channel(client, other, kind="email", emails=["o@other.example"]))[
        "channelId"
    ]
    # Many at once: exactly the channel's share is queued, whatever the interleaving.
    answers = await asyncio.gather(
        *(_send_test(client, acme, first) for _ in range(TESTS_PER_CHANNEL + 5))
    )
    assert sorted(r.status_code for r in answers) == [202] * TESTS_PER_CHANNEL + [429] * 5
    for r in answers:
        if r.status_code == 429:
            _assert_refused_politely(r)
    assert await _test_events(app) == TESTS_PER_CHANNEL
    # Another channel of the workspace, and another workspace's, are still heard.
    assert (await _send_test(client, acme, second)).status_code == 202
    assert (await _send_test(client, other, theirs)).status_code == 202


async def test_test_notices_are_limited_per_workspace(app, client) -> None:
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    channels = [
        (await add_channel(client, acme, kind="email", emails=[f"{i}@acme.example"]))["channelId"]
        for i in range(TESTS_PER_WORKSPACE // TESTS_PER_CHANNEL + 1)
    ]
    sent = 0
    for channel in channels[:-1]:
        for _ in range(TESTS_PER_CHANNEL):
            r = await _send_test(client, acme, channel)
            assert r.status_code == 202, r.text
            sent += 1
    assert sent == TESTS_PER_WORKSPACE
    # A channel that sent none is refused too: the workspace had its share.
    _assert_refused_politely(await _send_test(client, acme, channels[-1]))
    # Removing a channel gives nothing back.
    gone = channels[0]
    r = await client.delete(f"{CHANNELS.format(slug='acme')}/{gone}", headers=acme.auth())
    assert r.status_code == 204
    _assert_refused_politely(await _send_test(client, acme, channels[-1]))
    assert await _test_events(app) == TESTS_PER_WORKSPACE
    theirs = (await add_channel(client, other, kind="email", emails=["o@other.example"]))[
        "channelId"
    ]
    assert (await _send_test(client, other, theirs)).status_code == 202


async def test_the_admin_page_says_when_a_test_is_refused(app, client) -> None:
    acme = await make_tenant(app, "acme")
    channel = (await add_channel(client, acme, kind="email", emails=["a@acme.example"]))[
        "channelId"
    ]
    for _ in range(TESTS_PER_CHANNEL):
        assert (await _send_test(client, acme, channel)).status_code == 202
    assert (await sign_in(client, "admin@acme.example")).status_code == 303
    page = await client.get("/w/acme/admin/notices")
    assert page.status_code == 200, page.text
    r = await client.post(
        f"/w/acme/admin/notices/channels/{channel}/test",
        data={"csrf_token": csrf_of(page.text)},
    )
    assert r.status_code == 429, r.text
    assert int(r.headers["Retry-After"]) >= 1
    assert 'id="notices-error"' in r.text
    assert "test notices" in r.text
    assert await _test_events(app) == TESTS_PER_CHANNEL
