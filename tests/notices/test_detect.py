"""Episodes: opened once the condition has held for the threshold, told once, closed only
after the condition stayed away (hysteresis); a restart and a second board process find
the open episode instead of telling it again; a snoozed GPU is not told; a workspace whose
detection raises does not stop the others' (each is its own unit, logged and counted)."""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import timedelta
from typing import Any

import httpx
import pytest

from board.app import create_app
from tests.board.builders import enroll, make_tenant
from tests.board.db import execute
from tests.notices.helpers import (
    MINUTE,
    add_channel,
    at,
    deliver_until,
    events,
    idle_held_for_31_minutes,
    link_alice,
    notices_of,
    pass_failures,
    series,
    start_of_run,
    told,
    workspace_id,
)
from tests.notices.receivers import HttpReceiver, SmtpReceiver

S = timedelta(seconds=1)


async def test_one_notice_per_episode_through_flicker(
    app, client, hook: HttpReceiver, smtp: SmtpReceiver
) -> None:
    acme = await make_tenant(app, "acme")
    agent = (await enroll(client, acme, "node-a"))["agentToken"]
    await link_alice(client, acme)
    channel = await add_channel(client, acme, kind="webhook", url=hook.url)
    hook.secret = channel["secret"]
    detect = notices_of(app).detect_once
    t0 = start_of_run()

    last = await series(client, agent, t0, 30, "idle_held")  # t0 .. t0+29m
    assert (await detect(last + 10 * S))["acme"].opened == []  # 29 min: under the threshold
    await at(client, agent, t0 + 30 * MINUTE, "idle_held")
    assert (await detect(t0 + 30 * MINUTE + 10 * S))["acme"].opened == ["gpu.idle_held"]
    assert (await detect(t0 + 30 * MINUTE + 40 * S))["acme"].opened == []

    # A flicker: active for one minute, idle-held again; still the same episode.
    await at(client, agent, t0 + 31 * MINUTE, "active")
    await detect(t0 + 31 * MINUTE + 5 * S)
    await at(client, agent, t0 + 32 * MINUTE, "idle_held")
    await detect(t0 + 32 * MINUTE + 5 * S)
    await at(client, agent, t0 + 33 * MINUTE, "active")
    await detect(t0 + 33 * MINUTE + 5 * S)
    await at(client, agent, t0 + 34 * MINUTE, "idle_held")
    result = await detect(t0 + 34 * MINUTE + 5 * S)
    assert result["acme"].opened == result["acme"].closed == []

    # Active for good: the end is told once it stayed away for two minutes.
    for minute in (35, 36, 37):
        await at(client, agent, t0 + minute * MINUTE, "active")
        closed = (await detect(t0 + minute * MINUTE + 10 * S))["acme"].closed
        assert closed == ([] if minute < 37 else ["gpu.idle_held.resolved"])
    assert [e[1] for e in await events(app)] == ["gpu.idle_held", "gpu.idle_held.resolved"]

    async def all_sent() -> bool:
        return len(hook.delivered()) == 2 and len(smtp.messages) == 2

    await deliver_until(app, all_sent, "both notices to the webhook and to alice's member")
    stored = {str(e[0]): e[1] for e in await events(app)}
    # The webhook-id is the event id; both sent at once, in either order.
    by_type = {stored[r.event_id]: r for r in hook.delivered()}
    opened, ended = by_type["gpu.idle_held"], by_type["gpu.idle_held.resolved"]
    assert opened.verified
    assert ended.verified
    assert ended.json()["data"]["endedAt"]
    body = opened.json()
    assert body["type"] == "gpu.idle_held"
    assert set(body) == {"type", "timestamp", "data"}
    data = body["data"]
    assert data["workspace"]["slug"] == "acme"
    assert data["host"]["displayName"] == "node-a"
    assert data["gpu"]["uuid"] == "GPU-0"
    assert data["linuxUsers"] == ["alice"]
    assert data["memberEmails"] == ["member@acme.example"]
    assert data["since"].startswith(t0.isoformat()[:16])
    recipients = [rcpt for rcpt, _ in smtp.messages]
    assert recipients == [["member@acme.example"], ["member@acme.example"]]
    assert "idle-held" in smtp.messages[0][1]["Subject"]


async def test_restart_and_a_second_process_never_tell_twice(
    app, client, settings, hook: HttpReceiver
) -> None:
    acme = await make_tenant(app, "acme")
    agent = (await enroll(client, acme, "node-a"))["agentToken"]
    await add_channel(client, acme, kind="webhook", url=hook.url)
    t0 = start_of_run()
    last = await series(client, agent, t0, 32, "idle_held")

    # Two board processes (two apps, each its own engine and pools) look at once, twice.
    other = create_app(settings, run_maintenance=False)
    async with other.router.lifespan_context(other):
        both = [notices_of(app).detect_once(last), notices_of(other).detect_once(last)]
        await asyncio.gather(*both)
        await asyncio.gather(*both[:0], notices_of(other).detect_once(last + 20 * S))
    assert [e[1] for e in await events(app)] == ["gpu.idle_held"]

    # A "restarted" board (a new app on the same database) resumes the open episode.
    again = create_app(settings, run_maintenance=False)
    async with again.router.lifespan_context(again):
        await notices_of(again).detect_once(last + 40 * S)
        for minute in (32, 33, 34, 35):
            await at(client, agent, t0 + minute * MINUTE, "active")
            await notices_of(again).detect_once(t0 + minute * MINUTE + 10 * S)
    assert [e[1] for e in await events(app)] == ["gpu.idle_held", "gpu.idle_held.resolved"]
    open_rows = await _open_episodes(app)
    assert open_rows == 0


async def _open_episodes(app: Any) -> int:
    from tests.board.db import scalar

    return int(await scalar(app, "SELECT count(*) FROM notice_episodes WHERE closed_at IS NULL"))


async def test_snooze_link_silences_the_gpu(app, client, smtp: SmtpReceiver) -> None:
    acme = await make_tenant(app, "acme")
    agent = (await enroll(client, acme, "node-a"))["agentToken"]
    await link_alice(client, acme)
    t0 = start_of_run()
    last = await series(client, agent, t0, 31, "idle_held")
    await notices_of(app).detect_once(last + 5 * S)

    async def mailed() -> bool:
        return len(smtp.messages) == 1

    await deliver_until(app, mailed, "the idle-held mail")
    text = smtp.messages[0][1].get_payload(decode=True).decode()
    link = re.search(r"http://board\.test(/notices/snooze\?token=\S+)", text)
    assert link, text
    page = await client.get(link.group(1))
    assert page.status_code == 200
    assert "node-a" not in page.text
    assert "alice" not in page.text
    assert "GPU-0" not in page.text
    token = link.group(1).split("token=")[1]
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert csrf, page.text
    form = {"csrf_token": csrf.group(1)}
    no_csrf = await client.post("/notices/snooze", data={"token": token, "hours": "24"})
    assert no_csrf.status_code == 403
    done = await client.post("/notices/snooze", data={**form, "token": token, "hours": "24"})
    assert done.status_code == 200
    assert 'id="snoozed"' in done.text

    forged = await client.post(
        "/notices/snooze", data={**form, "token": token[:-2] + "xx", "hours": "4"}
    )
    assert forged.status_code == 404
    odd = await client.post("/notices/snooze", data={**form, "token": token, "hours": "5"})
    assert odd.status_code == 422

    # The episode ends (it was told, so its end is told), then a new one starts: silent.
    for minute in (31, 32, 33, 34):
        await at(client, agent, t0 + minute * MINUTE, "active")
        await notices_of(app).detect_once(t0 + minute * MINUTE + 10 * S)
    restart = t0 + 35 * MINUTE
    last = await series(client, agent, restart, 32, "idle_held")
    result = await notices_of(app).detect_once(last + 5 * S)
    assert result["acme"].opened == []
    assert [e[1] for e in await events(app)] == ["gpu.idle_held", "gpu.idle_held.resolved"]
    from tests.board.db import scalar

    assert await scalar(app, "SELECT count(*) FROM notice_episodes WHERE NOT notified") == 1


async def test_idle_booking_and_silent_host(app, client) -> None:
    from tests.board.reservation_builders import book_at

    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme, "node-a")
    agent = host["agentToken"]
    await link_alice(client, acme)
    t0 = start_of_run()
    await at(client, agent, t0 - MINUTE, "idle")  # the host's GPUs are known before booking
    await book_at(
        app,
        acme,
        t0 - MINUTE,
        hostId=host["hostId"],
        start=t0.isoformat(),
        end=(t0 + 60 * MINUTE).isoformat(),
    )
    last = await series(client, agent, t0, 31, "idle")
    result = await notices_of(app).detect_once(last + 5 * S)
    assert result["acme"].opened == ["reservation.idle"]
    (event,) = await events(app, "reservation.idle")
    data = event[2]["data"]
    assert data["memberEmails"] == ["member@acme.example"]
    assert data["reservation"]["memberEmail"] == "member@acme.example"

    # The host falls silent: host.stale at once, its end two minutes after it is back.
    silent = last + 10 * MINUTE
    assert (await notices_of(app).detect_once(silent))["acme"].opened == ["host.stale"]
    back = silent + MINUTE
    await at(client, agent, back, "active")
    await notices_of(app).detect_once(back + 5 * S)
    await at(client, agent, back + 2 * MINUTE, "active")
    closed = (await notices_of(app).detect_once(back + 2 * MINUTE + 10 * S))["acme"].closed
    assert sorted(closed) == ["host.stale.resolved", "reservation.idle.resolved"]


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
