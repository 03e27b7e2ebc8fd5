"""Follow-ups of the adversarial pass on notices: one workspace whose detection or digest
raises no longer stops every other workspace's notices (each workspace is its own unit,
logged and counted), and a webhook URL's `user:pass@` is never shown back."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from tests.board.builders import Tenant, enroll, make_tenant
from tests.board.db import execute, scalar
from tests.notices.helpers import (
    add_channel,
    at,
    deliver_until,
    deliveries,
    events,
    notices_of,
    series,
    start_of_run,
)
from tests.notices.receivers import HttpReceiver
from tests.web.helpers import sign_in

S = timedelta(seconds=1)
PASSWORD_IN_URL = "hunter2-webhook-pass"


def pass_failures(stage: str) -> float:
    found = REGISTRY.get_sample_value("gua_board_notices_pass_failures_total", {"stage": stage})
    return found or 0.0


async def workspace_id(app: Any, tenant: Tenant) -> int:
    found = await scalar(app, "SELECT id FROM workspaces WHERE slug = %s", tenant.slug)
    assert isinstance(found, int)
    return found


async def idle_held_for_31_minutes(
    client: httpx.AsyncClient, tenant: Tenant, hook: HttpReceiver
) -> tuple[str, Any]:
    """A webhook channel to `hook` and a GPU idle-held from t0 to t0+30m: the agent's
    token, and when the notice is due."""
    agent = str((await enroll(client, tenant, f"node-{tenant.slug}"))["agentToken"])
    channel = await add_channel(client, tenant, kind="webhook", url=hook.url)
    hook.secret = channel["secret"]
    last = await series(client, agent, start_of_run(), 31, "idle_held")
    return agent, last + 10 * S


def told(hook: HttpReceiver, type_: str) -> list[str]:
    """The workspaces whose `type_` notice the receiver got, signature verified."""
    return [
        r.json()["data"]["workspace"]["slug"]
        for r in hook.delivered()
        if r.verified and r.json()["type"] == type_
    ]


async def test_a_workspace_whose_detection_raises_does_not_stop_the_others(
    app: Any, client: httpx.AsyncClient, hook: HttpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: a host row whose newest tick the detector cannot read (written half, or by an
    older board) raised in `detect_once`, so every workspace after it, every pass, went
    without notices."""
    caplog.set_level(logging.WARNING)
    broken = await make_tenant(app, "broken")  # looked at first (ids in order)
    healthy = await make_tenant(app, "healthy")
    broken_agent = str((await enroll(client, broken, "node-broken"))["agentToken"])
    await at(client, broken_agent, start_of_run(), "idle_held")
    broken_id = await workspace_id(app, broken)
    await execute(
        app,
        "UPDATE hosts SET latest_tick = %s WHERE workspace_id = %s",
        '[[1, "idle_held", 0',
        broken_id,
    )
    _, due = await idle_held_for_31_minutes(client, healthy, hook)
    failed_before = pass_failures("detect")

    passed = await notices_of(app).detect_once(due)

    assert broken.slug not in passed
    assert passed[healthy.slug].opened == ["gpu.idle_held"]
    assert pass_failures("detect") == failed_before + 1

    async def healthy_told() -> bool:
        return told(hook, "gpu.idle_held") == [healthy.slug]

    await deliver_until(app, healthy_told, "the healthy workspace's notice at the receiver")
    failures = [r for r in caplog.records if "failed" in r.getMessage() and r.exc_info]
    assert [r.getMessage() for r in failures] == [
        f"notices: the pass over workspace {broken_id} failed; next pass retries"
    ]
    for secret in (broken_agent, broken.admin_token, healthy.admin_token, str(hook.secret)):
        assert secret not in caplog.text
    # The next pass fails for it again (counted again) and still goes on for the other.
    again = await notices_of(app).detect_once(due + 20 * S)
    assert healthy.slug in again
    assert broken.slug not in again
    assert pass_failures("detect") == failed_before + 2


async def test_a_digest_that_raises_costs_neither_its_episodes_nor_other_digests(
    app: Any, client: httpx.AsyncClient, hook: HttpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: a workspace time zone the board cannot load (written to the database by hand
    or by an older board) raised in the digest, which rolled back its episodes too and
    stopped every workspace after it."""
    caplog.set_level(logging.WARNING)
    zoneless = await make_tenant(app, "zoneless")
    other = await make_tenant(app, "other")
    _, due = await idle_held_for_31_minutes(client, zoneless, hook)
    r = await client.patch(
        f"/api/v1/workspaces/{other.slug}/settings",
        json={"timezone": "UTC", "digestHour": 0},
        headers=other.auth(),
    )
    assert r.status_code == 200, r.text
    zoneless_id = await workspace_id(app, zoneless)
    await execute(
        app,
        "UPDATE workspaces SET timezone = 'Mars/Olympus_Mons', digest_hour = 0 WHERE id = %s",
        zoneless_id,
    )
    failed_before = pass_failures("digest")

    passed = await notices_of(app).detect_once(due)

    assert passed[zoneless.slug].opened == ["gpu.idle_held"]
    assert other.slug in passed
    assert pass_failures("digest") == failed_before + 1
    digests = [e[2]["data"]["workspace"]["slug"] for e in await events(app, "digest.daily")]
    assert digests == [other.slug]
    # Its day was not taken: the next pass tries the digest again.
    assert (
        await scalar(
            app, "SELECT count(*) FROM notice_digests WHERE workspace_id = %s", zoneless_id
        )
        == 0
    )

    async def zoneless_told() -> bool:
        return told(hook, "gpu.idle_held") == [zoneless.slug]

    await deliver_until(app, zoneless_told, "the episode's notice despite the digest")
    assert any(
        r.getMessage()
        == f"notices: the digest of workspace {zoneless_id} failed; next pass retries"
        for r in caplog.records
    )


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
