"""Delivery: retries until a receiver that was down is back, 429/5xx retried (Retry-After
honoured), other 4xx not, a delivered notice never sent again; URL rules; the channel API
refuses bad input with a sentence and answers 404 across workspaces; Slack text; a notice
for a member removed meanwhile is not mailed; a channel sealed under an old secret key
fails at once with a reason."""

from __future__ import annotations

from typing import Any

import pytest

from board.notices.senders import backoff
from board.notices.urls import UrlRefused, address_allowed, parse_target
from board.settings import Settings
from tests.board.builders import enroll, make_tenant
from tests.notices.helpers import (
    add_channel,
    deliver_until,
    deliveries,
    link_alice,
    notices_of,
    series,
    start_of_run,
)
from tests.notices.receivers import HttpReceiver, SmtpReceiver
from tests.support.ports import free_port


async def _test(client: Any, tenant: Any, channel_id: str) -> dict[str, Any]:
    r = await client.post(
        f"/api/v1/workspaces/{tenant.slug}/notification-channels/{channel_id}/test",
        headers=tenant.auth(),
    )
    assert r.status_code == 202, r.text
    queued: dict[str, Any] = r.json()
    return queued


async def _status(app: Any) -> list[str]:
    return [row[4] for row in await deliveries(app)]


async def test_a_receiver_down_for_a_while_gets_it_once_back(app, client) -> None:
    acme = await make_tenant(app, "acme")
    port = free_port()  # nothing listens yet
    receiver = HttpReceiver(port=port)
    channel = await add_channel(client, acme, kind="webhook", url=f"http://127.0.0.1:{port}/hook")
    receiver.secret = channel["secret"]
    queued = await _test(client, acme, channel["channelId"])

    async def tried_twice() -> bool:
        return (await deliveries(app))[0][5] >= 2

    await deliver_until(app, tried_twice, "two refused attempts")
    assert await _status(app) == ["pending"]
    receiver.start()
    try:

        async def delivered() -> bool:
            return await _status(app) == ["delivered"]

        await deliver_until(app, delivered, "delivery once the receiver is up")
        for _ in range(5):
            await app.state.runtime.notices.deliver_due()
        assert [r.event_id for r in receiver.delivered()] == [queued["eventId"]]
        assert receiver.delivered()[0].verified
        listed = await client.get("/api/v1/workspaces/acme/notifications", headers=acme.auth())
        shown = listed.json()["notifications"][0]
        assert shown["status"] == "delivered"
        assert shown["responseStatus"] == 200
        assert channel["secret"] not in listed.text
    finally:
        receiver.stop()


async def test_429_and_5xx_are_retried_other_4xx_are_not(app, client) -> None:
    acme = await make_tenant(app, "acme")
    busy = HttpReceiver(script=[429, 503], headers_out={"Retry-After": "1"}).start()
    gone = HttpReceiver(script=[410]).start()
    try:
        first = await add_channel(client, acme, kind="webhook", url=busy.url)
        second = await add_channel(client, acme, kind="slack", url=gone.url)
        await _test(client, acme, first["channelId"])
        await _test(client, acme, second["channelId"])

        async def settled() -> bool:
            return sorted(await _status(app)) == ["delivered", "failed"]

        await deliver_until(app, settled, "the 429/503 retried, the 410 given up")
        assert [r.answered for r in busy.received] == [429, 503, 200]
        assert [r.answered for r in gone.received] == [410]
        # Slack gets a readable message, not the signed event.
        assert "test notice from GUA Board" in gone.received[0].json()["text"]
        assert "webhook-signature" not in gone.received[0].headers

        failed = next(row for row in await deliveries(app) if row[4] == "failed")
        retry = await client.post(
            f"/api/v1/workspaces/acme/notifications/{failed[0]}/retry", headers=acme.auth()
        )
        assert retry.status_code == 204
        delivered = next(row for row in await deliveries(app) if row[4] == "delivered")
        again = await client.post(
            f"/api/v1/workspaces/acme/notifications/{delivered[0]}/retry", headers=acme.auth()
        )
        assert again.status_code == 409
        assert isinstance(again.json()["detail"], str)

        async def retried() -> bool:
            return len(gone.received) == 2

        await deliver_until(app, retried, "the retried delivery")
        assert len(busy.received) == 3  # the delivered one was never sent again
    finally:
        busy.stop()
        gone.stop()


def test_backoff_grows_and_honours_retry_after() -> None:
    assert 0.5 <= backoff(1, 1.0, None) <= 1.0
    assert 4.0 <= backoff(4, 1.0, None) <= 8.0
    assert backoff(1, 1.0, 30.0) >= 30.0
    assert backoff(40, 15.0, None) <= 3600.0


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "192.168.1.1",
        "169.254.169.254",
        "::1",
        "fe80::1",
        "224.0.0.1",
        "0.0.0.0",
        "100.64.0.1",
        "::ffff:127.0.0.1",
        "240.0.0.1",
    ],
)
def test_private_and_special_addresses_refused(address: str) -> None:
    import ipaddress

    assert not address_allowed(ipaddress.ip_address(address), allow_insecure=False)


def test_url_rules() -> None:
    with pytest.raises(UrlRefused):
        parse_target("http://example.com/hook", allow_insecure=False)
    with pytest.raises(UrlRefused):
        parse_target("https://user:pw@example.com/hook", allow_insecure=False)
    with pytest.raises(UrlRefused):
        parse_target("ftp://example.com/", allow_insecure=True)
    assert parse_target("https://example.com/h?a=1", allow_insecure=False).path == "/h?a=1"


async def test_channel_api_refuses_bad_input_and_other_workspaces(app, client) -> None:
    acme = await make_tenant(app, "acme")
    other = await make_tenant(app, "other")
    url = "/api/v1/workspaces/acme/notification-channels"
    for bad in (
        {"kind": "pager", "url": "https://example.com"},
        {"kind": "webhook"},
        {"kind": "webhook", "url": "https://example.com", "events": ["gpu.melted"]},
        {"kind": "webhook", "url": "https://example.com", "events": []},
        {"kind": "email", "emails": ["not-an-address"]},
        {"kind": "email", "emails": []},
        {"kind": "email", "emails": [f"a{i}@x.example" for i in range(21)]},
        {"kind": "webhook", "url": "https://example.com/" + "a" * 3000},
        {"kind": "webhook", "url": "https://example.com", "extra": 1},
        {"kind": "webhook", "url": "ftp://example.com"},
    ):
        r = await client.post(url, json=bad, headers=acme.auth())
        assert r.status_code == 422, (bad, r.text)
        assert isinstance(r.json()["detail"], str)
    member = await client.post(
        url, json={"kind": "email", "emails": ["a@x.example"]}, headers=acme.auth("member")
    )
    assert member.status_code == 403
    made = await add_channel(client, acme, kind="email", emails=["Ops@Lab.example"])
    assert made["emails"] == ["ops@lab.example"]
    assert made["secret"] is None
    listed = (await client.get(url, headers=acme.auth())).json()["channels"]
    assert [c["channelId"] for c in listed] == [made["channelId"]]
    assert "secret" not in listed[0]
    cross = f"/api/v1/workspaces/other/notification-channels/{made['channelId']}"
    assert (await client.delete(cross, headers=other.auth())).status_code == 404
    assert (await client.post(cross + "/test", headers=other.auth())).status_code == 404
    assert (await client.get(url, headers=other.auth())).status_code == 404
    assert (await client.delete(f"{url}/not-a-uuid", headers=acme.auth())).status_code == 404
    assert (
        await client.delete(f"{url}/{made['channelId']}", headers=acme.auth())
    ).status_code == 204
    assert (await client.get(url, headers=acme.auth())).json()["channels"] == []


async def test_settings_carry_the_notice_thresholds(app, client) -> None:
    acme = await make_tenant(app, "acme")
    url = "/api/v1/workspaces/acme/settings"
    r = await client.patch(
        url, json={"idleHeldNoticeMinutes": 45, "digestHour": 7}, headers=acme.auth()
    )
    assert r.status_code == 200, r.text
    assert r.json()["idleHeldNoticeMinutes"] == 45
    assert r.json()["digestHour"] == 7
    off = await client.patch(url, json={"digestHour": None}, headers=acme.auth())
    assert off.json()["digestHour"] is None
    for bad in ({"digestHour": 24}, {"idleHeldNoticeMinutes": 0}, {"idleHeldNoticeMinutes": None}):
        refused = await client.patch(url, json=bad, headers=acme.auth())
        assert refused.status_code == 422, bad
        assert isinstance(refused.json()["detail"], str)


async def test_a_notice_queued_for_a_member_who_is_then_removed_is_not_mailed(
    app: Any, client: Any, smtp: SmtpReceiver
) -> None:
    """Removal closes the workspace to the person at once; a notice about its GPUs
    queued just before (or a booking of theirs still in force) was mailed to them after."""
    acme = await make_tenant(app, "acme")
    agent = (await enroll(client, acme, "node-a"))["agentToken"]
    await link_alice(client, acme)
    last = await series(client, agent, start_of_run(), 31, "idle_held")
    await notices_of(app).detect_once(last)
    assert [row[3] for row in await deliveries(app)] == ["member@acme.example"]
    removed = await client.delete(
        "/api/v1/workspaces/acme/members/member@acme.example", headers=acme.auth()
    )
    assert removed.status_code in (200, 204), removed.text

    async def settled() -> bool:
        return [row[4] for row in await deliveries(app)] not in (["pending"], ["sending"])

    await deliver_until(app, settled, "the queued mail's attempt")
    assert [row[4] for row in await deliveries(app)] == ["failed"]
    assert smtp.messages == []
    listed = await client.get("/api/v1/workspaces/acme/notifications", headers=acme.auth())
    assert "no longer" in listed.json()["notifications"][0]["response"]


async def test_a_channel_sealed_under_an_old_secret_key_fails_at_once_with_a_reason(
    app: Any, client: Any, settings: Settings
) -> None:
    """docs/notices.md: changing the secret key makes existing channels unusable. Their
    deliveries raised inside the attempt (InvalidTag) and were retried ten times as an
    "Internal error." instead of failing once with a sentence saying what to do."""
    from board.notices import outbox

    acme = await make_tenant(app, "acme")
    receiver = HttpReceiver().start()
    try:
        channel = await add_channel(client, acme, kind="webhook", url=receiver.url)
        queued = await client.post(
            f"/api/v1/workspaces/acme/notification-channels/{channel['channelId']}/test",
            headers=acme.auth(),
        )
        assert queued.status_code == 202, queued.text
        rotated = settings.model_copy(update={"secret_key": "r" * 40 + "-a-new-secret-key"})
        async with app.state.runtime.pool.connection() as conn:
            await conn.set_autocommit(True)
            claimed = await outbox.claim(conn, 8, 60.0)
            assert len(claimed) == 1
            outcome = await outbox.attempt(rotated, claimed[0])
            await conn.set_autocommit(False)
    finally:
        receiver.stop()
    assert not outcome.delivered
    assert not outcome.retry
    assert "secret key" in outcome.response
    assert receiver.received == []
