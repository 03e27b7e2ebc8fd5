"""The daily digest: yesterday's figures are the reports' own for that day, unhealthy
hosts and the longest idle-held GPUs now; queued once per workspace and day, for a
workspace in a half-hour zone too; a digest that raises costs neither its episodes nor
the other workspaces' digests."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.board.builders import enroll, make_tenant
from tests.board.db import execute, scalar
from tests.board.reservation_builders import book_at
from tests.board.test_reports_builders import quick_tenant
from tests.notices.helpers import (
    MINUTE,
    at,
    deliver_until,
    events,
    idle_held_for_31_minutes,
    link_alice,
    notices_of,
    pass_failures,
    told,
    workspace_id,
)
from tests.notices.receivers import HttpReceiver, SmtpReceiver


async def test_digest_equals_the_reports_and_is_sent_once(app, client, smtp: SmtpReceiver) -> None:
    acme = await make_tenant(app, "acme")
    host = await enroll(client, acme, "node-a")
    agent = host["agentToken"]
    await link_alice(client, acme)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    yesterday = today - timedelta(days=1)

    # 10:00-10:45 idle-held by alice; 12:00-12:40 booked by the member, nothing running.
    for minute in range(46):
        await at(client, agent, yesterday + timedelta(hours=10) + minute * MINUTE, "idle_held")
    booked = yesterday + timedelta(hours=12)
    await book_at(
        app,
        acme,
        booked - timedelta(hours=1),
        hostId=host["hostId"],
        start=booked.isoformat(),
        end=(booked + 40 * MINUTE).isoformat(),
    )
    for minute in range(41):
        await at(client, agent, booked + minute * MINUTE, "idle")

    settings_url = "/api/v1/workspaces/acme/settings"
    r = await client.patch(settings_url, json={"digestHour": 0}, headers=acme.auth())
    assert r.status_code == 200, r.text
    await notices_of(app).detect_once(today + 20 * MINUTE)
    await notices_of(app).detect_once(today + 40 * MINUTE)
    (digest,) = await events(app, "digest.daily")
    data = digest[2]["data"]
    assert data["day"] == yesterday.date().isoformat()

    window = {"from": yesterday.date().isoformat(), "to": today.date().isoformat()}
    usage = await client.get(
        "/api/v1/workspaces/acme/reports/usage",
        params={**window, "groupBy": "user"},
        headers=acme.auth(),
    )
    assert usage.status_code == 200, usage.text
    expected = [
        {"user": row["user"], "idleHeldGpuHours": row["idleHeldGpuHours"]}
        for row in usage.json()["rows"]
        if row["idleHeldGpuHours"] > 0
    ]
    assert expected  # alice's 45 minutes
    assert data["idleHeldByUser"] == expected
    assert data["idleHeldGpuHours"] == usage.json()["totals"]["idleHeldGpuHours"]
    # 45 minutes idle-held at 100 W; no electricity price or carbon intensity: no cost.
    burned = {"kWh": 0.075, "cost": None, "currency": None, "co2eKg": None}
    assert data["idleHeldEnergy"] == burned
    assert usage.json()["totals"]["idleHeldEnergyKWh"] == burned["kWh"]

    booked_report = await client.get(
        "/api/v1/workspaces/acme/reports/reservations",
        params={**window, "groupBy": "member"},
        headers=acme.auth(),
    )
    assert booked_report.status_code == 200, booked_report.text
    expected_idle = [
        {"memberEmail": row["memberEmail"], "reservedIdleGpuHours": row["reservedIdleGpuHours"]}
        for row in booked_report.json()["rows"]
        if row["reservedIdleGpuHours"] > 0
    ]
    assert expected_idle
    assert data["reservedIdleByMember"] == expected_idle
    assert data["reservedIdleGpuHours"] == booked_report.json()["totals"]["reservedIdleGpuHours"]
    # The host has been silent since yesterday: it is listed as stale.
    assert [h["displayName"] for h in data["unhealthyHosts"]] == ["node-a"]

    async def mailed() -> bool:
        return any(rcpt == ["admin@acme.example"] for rcpt, _ in smtp.messages)

    await deliver_until(app, mailed, "the digest mailed to the admin")
    mail = next(m for rcpt, m in smtp.messages if rcpt == ["admin@acme.example"])
    assert "daily digest" in mail["Subject"]
    text = mail.get_payload(decode=True).decode()
    assert "alice" in text
    assert f"Idle-held GPUs burned 0.075 kWh on {data['day']}\r\n" in text


async def test_a_half_hour_zone_does_not_stop_every_workspaces_notices(
    app: Any, client: httpx.AsyncClient
) -> None:
    """Was an Unprocessable raised by the digest of a workspace whose admin chose
    Asia/Kolkata: the notices pass stopped there, for every workspace, every pass."""
    from tests.notices.helpers import events, notices_of

    kolkata = await quick_tenant(app, "kolkata")
    other = await quick_tenant(app, "other")
    for tenant, zone in ((kolkata, "Asia/Kolkata"), (other, "UTC")):
        r = await client.patch(
            f"/api/v1/workspaces/{tenant.slug}/settings",
            json={"timezone": zone, "digestHour": 0},
            headers=tenant.auth(),
        )
        assert r.status_code == 200, r.text
    now = datetime.now(UTC).replace(hour=20, minute=0, second=0, microsecond=0)
    passed = await notices_of(app).detect_once(now)
    assert set(passed) >= {kolkata.slug, other.slug}
    digests = [e[2]["data"] for e in await events(app, "digest.daily")]
    assert sorted(d["workspace"]["slug"] for d in digests) == sorted([kolkata.slug, other.slug])
    # Kolkata's yesterday: its local day, the UTC hours that start on it.
    (local,) = [d for d in digests if d["workspace"]["slug"] == kolkata.slug]
    assert (
        local["day"]
        == (now + timedelta(hours=5, minutes=30) - timedelta(days=1)).date().isoformat()
    )


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
