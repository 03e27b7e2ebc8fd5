"""Budget notices: `budget.warning` at 80 % used and `budget.exceeded` at 100 %, each told
once per team and period, to the team's contact (not a member), the admins, and a
webhook, a Slack and a mail channel; their figures are the budgets report's; the daily
digest lists the team at risk."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from board.notices.budget_watch import CHECK_EVERY
from tests.board.builders import Tenant, enroll, push
from tests.board.test_reports_builders import gpu, observation, proc, quick_tenant
from tests.notices.helpers import MINUTE, add_channel, deliver_until, deliveries, events, notices_of
from tests.notices.receivers import HttpReceiver, SmtpReceiver

CONTACT = "leads@vision.example"
BUDGET_TYPES = ("budget.warning", "budget.exceeded")


def both_gpus_busy(at: datetime) -> dict[str, Any]:
    """alice runs on two GPUs: two GPU-hours an hour."""
    return observation(at, [gpu(i, util=90, state="active", procs=[proc("alice")]) for i in (0, 1)])


def a_zone_without_a_month_edge(start: datetime, end: datetime) -> str:
    """UTC, unless a month begins in [start, end] there; then a zone 14 hours away."""
    for zone in ("UTC", "Pacific/Kiritimati"):
        tz = ZoneInfo(zone)
        if start.astimezone(tz).month == end.astimezone(tz).month:
            return zone
    raise AssertionError("two zones 14 hours apart cannot both have a month edge in 40 min")


async def _workspace(client: httpx.AsyncClient, tenant: Tenant, zone: str) -> None:
    api = f"/api/v1/workspaces/{tenant.slug}"
    settings = {"timezone": zone}
    r = await client.patch(f"{api}/settings", json=settings, headers=tenant.auth())
    assert r.status_code == 200, r.text
    r = await client.put(
        f"{api}/directory/alice",
        json={"memberEmail": None, "team": "vision"},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    r = await client.put(
        f"{api}/directory/teams/vision", json={"contactEmail": CONTACT}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    budget = {"period": "month", "gpuHours": 0.6, "from": "2020-01-01"}
    r = await client.put(f"{api}/budgets/vision", json=budget, headers=tenant.auth())
    assert r.status_code == 200, r.text


async def _budget_events(app: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(t, body["data"]) for _, t, body in await events(app) if t in BUDGET_TYPES]


async def test_warning_then_exceeded_each_told_once_on_every_channel_kind(
    app: Any, client: httpx.AsyncClient, smtp: SmtpReceiver, hook: HttpReceiver
) -> None:
    tenant = await quick_tenant(app, "budn")
    start = (datetime.now(UTC) - timedelta(minutes=40)).replace(second=0, microsecond=0)
    await _workspace(client, tenant, a_zone_without_a_month_edge(start, datetime.now(UTC)))
    channel = await add_channel(client, tenant, kind="webhook", url=hook.url)
    hook.secret = channel["secret"]
    slack = HttpReceiver().start()
    try:
        await add_channel(client, tenant, kind="slack", url=f"{slack.url}/services/T0/B0/x")
        await add_channel(client, tenant, kind="email", emails=["ops@lab.example"])
        agent = (await enroll(client, tenant, "node-b"))["agentToken"]
        # 15 minutes on two GPUs: 0.5 GPU-hours, 83 % of the budget of 0.6.
        for i in range(16):
            assert (
                await push(client, agent, both_gpus_busy(start + i * MINUTE))
            ).status_code == 202
        notices = notices_of(app)
        first = start + 16 * MINUTE
        await notices.detect_once(first)
        assert [t for t, _ in await _budget_events(app)] == ["budget.warning"]
        # Looked at again past the pause between looks: still at 83 %, told already.
        await notices.detect_once(first + CHECK_EVERY + MINUTE)
        assert len(await _budget_events(app)) == 1

        # Seven minutes more: 0.733 GPU-hours, past the budget.
        for i in range(16, 23):
            assert (
                await push(client, agent, both_gpus_busy(start + i * MINUTE))
            ).status_code == 202
        await notices.detect_once(first + 2 * (CHECK_EVERY + MINUTE))
        await notices.detect_once(first + 3 * (CHECK_EVERY + MINUTE))
        told = await _budget_events(app)
        assert [t for t, _ in told] == ["budget.warning", "budget.exceeded"]
        warning, exceeded = (data for _, data in told)
        assert (warning["team"], warning["usedGpuHours"], warning["budgetGpuHours"]) == (
            "vision",
            0.5,
            0.6,
        )
        assert (warning["status"], warning["usedShare"]) == ("warning", 0.833333)
        assert (exceeded["status"], exceeded["usedGpuHours"]) == ("exceeded", 0.733333)
        assert exceeded["contactEmail"] == CONTACT
        assert (
            exceeded["url"]
            == f"http://board.test/w/{tenant.slug}/budgets?period={exceeded['period']}"
        )
        # The figures are the budgets report's for the same period.
        r = await client.get(
            f"/api/v1/workspaces/{tenant.slug}/reports/budgets",
            params={"period": exceeded["period"]},
            headers=tenant.auth("finance"),
        )
        row = next(row for row in r.json()["rows"] if row["team"] == "vision")
        assert row["usedGpuHours"] == exceeded["usedGpuHours"]

        async def all_sent() -> bool:
            found = [d for d in await deliveries(app) if d[1] in BUDGET_TYPES]
            return len(found) == 10 and all(d[4] == "delivered" for d in found)

        await deliver_until(app, all_sent, "every budget delivery delivered")
        sent = sorted((d[1], d[2], d[3]) for d in await deliveries(app) if d[1] in BUDGET_TYPES)
        admin = f"admin@{tenant.slug}.example"
        for kind in BUDGET_TYPES:
            recipients = sorted((k, r.split(":")[0]) for t, k, r in sent if t == kind)
            assert recipients == sorted(
                [
                    ("webhook", "channel"),
                    ("slack", "channel"),
                    ("email", "channel"),
                    ("email", CONTACT),
                    ("email", admin),
                ]
            ), sent
        # The webhook: signed, once per type.
        hooked = [r.json() for r in hook.delivered() if r.verified]
        assert [b["type"] for b in hooked if b["type"] in BUDGET_TYPES] == list(BUDGET_TYPES)
        # Slack: a readable line, escaped text.
        texts = [r.json()["text"] for r in slack.delivered()]
        assert sum("Budget warning for team vision" in t for t in texts) == 1
        assert sum("Budget exceeded for team vision" in t for t in texts) == 1
        # Mail: the contact, the admin and the channel's address, one of each per type.
        mails = [(to, m["Subject"], m.get_payload(decode=True).decode()) for to, m in smtp.messages]
        for words in ("Budget warning", "Budget exceeded"):
            got = sorted(a for to, subject, _ in mails if words in subject for a in to)
            assert got == sorted([CONTACT, admin, "ops@lab.example"]), mails
        body = next(text for _, subject, text in mails if "Budget exceeded" in subject)
        assert "GPU-hours: 0.733333 used of 0.6" in body
        assert "over the last 7 days" in body
    finally:
        slack.stop()

    # The digest lists the team at risk.
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings", json={"digestHour": 0}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    await notices.detect_once(first + 4 * (CHECK_EVERY + MINUTE))
    digest = [body["data"] for _, t, body in await events(app) if t == "digest.daily"]
    assert [(t["team"], t["status"]) for t in digest[0]["teamsAtRisk"]] == [("vision", "exceeded")]
    assert len(await _budget_events(app)) == 2

    async def digest_mailed() -> bool:
        return any("daily digest" in str(m["Subject"]) for _, m in smtp.messages)

    await deliver_until(app, digest_mailed, "the digest mailed")
    text = next(
        m.get_payload(decode=True).decode()
        for _, m in smtp.messages
        if "daily digest" in str(m["Subject"])
    )
    assert "Teams at or near their budget" in text
    assert "vision" in text
