"""Channels: their limits hold under concurrent requests (at most MAX_CHANNELS per
workspace, test notices limited per channel and per workspace: a 429 with a sentence and
Retry-After, from the API and from the admin page's form, each workspace on its own); an
email channel takes only addresses mail reads as themselves; a channel's secrets (a Slack
URL's path, a webhook's query or `user:pass@`) are never shown back or logged."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from board.notices.service import MAX_CHANNELS, TESTS_PER_CHANNEL, TESTS_PER_WORKSPACE
from tests.board.builders import Tenant, make_tenant
from tests.board.db import execute, scalar
from tests.notices.helpers import (
    add_channel,
    deliver_until,
    deliveries,
)
from tests.notices.receivers import HttpReceiver, SmtpReceiver
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


ODD_ADDRESSES = [
    "a)b@acme.example",  # mailed to "a"
    "a<b>@acme.example",  # mailed to "b"
    "a,b@acme.example",  # mailed to "a" and "b"
    "a:b@acme.example",  # a group: mailed to "b@acme.example"
    "(a@acme.example",  # no mail for any address of the channel
    'a@"acme".example',  # the mail library raised
]


@pytest.mark.parametrize("address", ODD_ADDRESSES)
async def test_an_email_channel_refuses_addresses_mail_would_read_otherwise(
    app: Any, client: Any, smtp: SmtpReceiver, address: str
) -> None:
    """Each was accepted (one "@", no spaces), then read by the mail library as another
    address, or none: mail went to someone not listed, or to nobody of the channel."""
    acme = await make_tenant(app, "acme")
    url = f"/api/v1/workspaces/{acme.slug}/notification-channels"
    r = await client.post(
        url,
        json={"kind": "email", "emails": ["ops@acme.example", address]},
        headers=acme.auth(),
    )
    assert r.status_code == 422, (r.status_code, r.text[:300])
    assert isinstance(r.json()["detail"], str)
    assert (await client.get(url, headers=acme.auth())).json()["channels"] == []


async def test_an_address_stored_before_the_rule_is_left_out_not_mailed_elsewhere(
    app: Any, client: Any, smtp: SmtpReceiver
) -> None:
    acme = await make_tenant(app, "acme")
    channel = await add_channel(client, acme, kind="email", emails=["ops@acme.example"])
    await execute(
        app,
        "UPDATE notice_channels SET emails = %s WHERE public_id = %s",
        ["ops@acme.example", *ODD_ADDRESSES],
        channel["channelId"],
    )
    queued = await client.post(
        f"/api/v1/workspaces/acme/notification-channels/{channel['channelId']}/test",
        headers=acme.auth(),
    )
    assert queued.status_code == 202, queued.text

    async def settled() -> bool:
        return [row[4] for row in await deliveries(app)] != ["pending"]

    await deliver_until(app, settled, "the test mail")
    assert [row[4] for row in await deliveries(app)] == ["delivered"]
    assert [m[0] for m in smtp.messages] == [["ops@acme.example"]]


async def test_a_slack_urls_path_and_a_webhooks_query_are_in_no_log_line(
    app: Any, client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A Slack incoming-webhook URL is its own credential (the board shows only its
    host), yet httpx logged every delivery's URL at INFO, path and query included."""
    caplog.set_level(logging.INFO)
    # The agent's logging setup (run in-process by the agent's tests, maybe earlier in
    # this worker) quiets httpx to WARNING; this test needs to see what httpx would log.
    caplog.set_level(logging.INFO, logger="httpx")
    acme = await make_tenant(app, "acme")
    receiver = HttpReceiver().start()
    slack_secret = "services/T0000/B0000/SLACKSECRETabcdef123456"
    hook_secret = "hooksecret0123456789abcdef"
    try:
        made = [
            await add_channel(
                client,
                acme,
                kind="slack",
                url=f"http://127.0.0.1:{receiver.port}/{slack_secret}",
            ),
            await add_channel(
                client,
                acme,
                kind="webhook",
                url=f"http://127.0.0.1:{receiver.port}/hook?key={hook_secret}",
            ),
        ]
        for channel in made:
            r = await client.post(
                f"/api/v1/workspaces/acme/notification-channels/{channel['channelId']}/test",
                headers=acme.auth(),
            )
            assert r.status_code == 202, r.text

        async def delivered() -> bool:
            return [row[4] for row in await deliveries(app)] == ["delivered", "delivered"]

        await deliver_until(app, delivered, "both test notices")
    finally:
        receiver.stop()
    assert sorted(r.headers.get("host", "") for r in receiver.received)  # they did arrive
    lines = [record.getMessage() for record in caplog.records]
    assert any("HTTP Request" in line for line in lines), lines  # httpx did log
    leaked = [line for line in lines if slack_secret in line or hook_secret in line]
    assert not leaked, leaked


PASSWORD_IN_URL = "hunter2-webhook-pass"


async def test_a_webhook_urls_password_is_never_shown(
    app: Any, client: httpx.AsyncClient, hook: HttpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: a channel's URL holding `user:pass@` (a channel stored before the rule that
    refuses one) was answered as is by the API and the admin page."""
    caplog.set_level(logging.DEBUG)
    acme = await make_tenant(app, "acme")
    channel = await add_channel(client, acme, kind="webhook", url=hook.url)
    stored = hook.url.replace("http://", f"http://hookuser:{PASSWORD_IN_URL}@")
    await execute(
        app,
        "UPDATE notice_channels SET url = %s WHERE public_id = %s",
        stored,
        channel["channelId"],
    )
    shown = hook.url.replace("http://", "http://***@")
    base = f"/api/v1/workspaces/{acme.slug}"

    listed = await client.get(f"{base}/notification-channels", headers=acme.auth())
    assert listed.status_code == 200, listed.text
    assert PASSWORD_IN_URL not in listed.text
    assert "hookuser" not in listed.text
    assert [c["url"] for c in listed.json()["channels"]] == [shown]

    assert (await sign_in(client, f"admin@{acme.slug}.example")).status_code == 303
    page = await client.get(f"/w/{acme.slug}/admin/notices")
    assert page.status_code == 200, page.text
    assert PASSWORD_IN_URL not in page.text
    assert "hookuser" not in page.text
    assert shown in page.text

    # Deliveries read the stored URL (untouched), whose credentials the URL rules
    # refuse: the attempt fails, and neither its record nor a log line shows them.
    url = await scalar(
        app, "SELECT url FROM notice_channels WHERE public_id = %s", channel["channelId"]
    )
    assert url == stored
    r = await client.post(
        f"{base}/notification-channels/{channel['channelId']}/test", headers=acme.auth()
    )
    assert r.status_code == 202, r.text

    async def settled() -> bool:
        return [d[4] for d in await deliveries(app)] == ["failed"]

    await deliver_until(app, settled, "the test's attempt recorded")
    assert hook.received == []
    answered = await client.get(f"{base}/notifications", headers=acme.auth())
    assert answered.status_code == 200, answered.text
    assert "user name or password" in answered.json()["notifications"][0]["response"]
    for text in (answered.text, caplog.text):
        assert PASSWORD_IN_URL not in text
