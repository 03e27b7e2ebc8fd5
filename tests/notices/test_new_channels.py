"""A channel added while conditions are open hears of them once, marked as already open.

bob's GPU has been idle-held for hours and another host reports an error before any
channel exists; then a Slack channel and a webhook are added. Each gets both open
episodes, once, saying they were already open when the channel was added, and later
passes tell them nothing twice. A channel that listens to host events only gets the host.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.board.builders import enroll, make_tenant, push
from tests.board.test_reports_builders import gpu, observation, proc, set_max_gap
from tests.notices.helpers import add_channel, deliver_until, events, notices_of
from tests.notices.receivers import HttpReceiver

S = timedelta(seconds=1)
QUARTER = timedelta(minutes=15)
MARK = "already open when this channel was added"


async def test_a_new_channel_hears_of_the_episodes_already_open(
    app, client, hook: HttpReceiver
) -> None:
    acme = await make_tenant(app, "acme")
    await set_max_gap(client, acme, 1200)  # one observation every 15 minutes is observed
    node = (await enroll(client, acme, "node-a"))["agentToken"]
    broken = (await enroll(client, acme, "node-b"))["agentToken"]
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - timedelta(hours=6)
    for i in range(25):  # six hours of bob's idle-held card, up to now
        held = observation(start + i * QUARTER, [gpu(0, state="idle_held", procs=[proc("bob")])])
        assert (await push(client, node, held)).status_code == 202
    failed = observation(now - 30 * S, [], status="error")
    assert (await push(client, broken, failed)).status_code == 202
    detect = notices_of(app).detect_once
    opened = (await detect(now + 5 * S))["acme"].opened
    assert sorted(opened) == ["gpu.idle_held", "host.error"]  # told to nobody: no channel

    slack = HttpReceiver().start()
    hosts_only = HttpReceiver().start()
    try:
        await add_channel(client, acme, kind="slack", url=slack.url)
        made = await add_channel(client, acme, kind="webhook", url=hook.url)
        hook.secret = made["secret"]
        await add_channel(client, acme, kind="slack", url=hosts_only.url, events=["host.error"])
        later = await detect(now + 30 * S)
        assert later["acme"].opened == later["acme"].closed == []

        async def all_sent() -> bool:
            return (
                len(slack.delivered()) == 2
                and len(hook.delivered()) == 2
                and len(hosts_only.delivered()) == 1
            )

        await deliver_until(app, all_sent, "the open episodes to each new channel")
        await detect(now + 60 * S)
        await notices_of(app).deliver_due()
    finally:
        slack.stop()
        hosts_only.stop()

    # Once each: the webhook and the first Slack channel got two, the host channel one.
    assert len(slack.received) == len(hook.received) == 2
    assert len(hosts_only.received) == 1
    bodies = {r.json()["type"]: r.json() for r in hook.delivered()}
    assert set(bodies) == {"gpu.idle_held", "host.error"}
    assert all(r.verified for r in hook.delivered())
    idle = bodies["gpu.idle_held"]["data"]
    assert idle["alreadyOpen"] is True
    assert idle["linuxUsers"] == ["bob"]
    assert idle["since"].startswith(start.isoformat()[:16])  # the episode's own start
    assert bodies["host.error"]["data"]["alreadyOpen"] is True
    assert bodies["host.error"]["data"]["host"]["displayName"] == "node-b"
    texts = sorted(r.json()["text"] for r in slack.delivered())
    assert all(MARK in t for t in texts), texts
    assert any("idle-held" in t and "(bob)" in t for t in texts), texts
    assert MARK in hosts_only.delivered()[0].json()["text"]
    assert "error" in hosts_only.delivered()[0].json()["text"]
    # The first notices (before any channel) and the catch-ups: nothing else was queued.
    kinds = sorted(e[1] for e in await events(app))
    assert kinds == ["gpu.idle_held"] * 3 + ["host.error"] * 4
