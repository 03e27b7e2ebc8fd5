"""`job.idle`: a job's allocated GPU unused (or idle-held) for jobIdleNoticeMinutes is told
to the job's user once, escalated once to the account's team contact and the admins
after jobIdleEscalateMinutes, and resolved (to all of them) when the GPU turns active or
the job ends; one episode through a switch from unused to idle-held; nothing for a host
inside a maintenance window. Mail through the real SMTP receiver."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from tests.board.builders import Tenant, enroll, make_tenant
from tests.board.db import execute
from tests.board.job_rows import add_job
from tests.notices.helpers import (
    MINUTE,
    S,
    at,
    deliver_until,
    events,
    link_alice,
    notices_of,
    start_of_run,
)
from tests.notices.receivers import SmtpReceiver


async def setup(client: httpx.AsyncClient, acme: Tenant) -> tuple[str, str]:
    """Thresholds 10 and 20 minutes, alice linked to the member, team physics with a
    contact; the node's agent token and host id."""
    r = await client.patch(
        f"/api/v1/workspaces/{acme.slug}/settings",
        json={"jobIdleNoticeMinutes": 10, "jobIdleEscalateMinutes": 20},
        headers=acme.auth(),
    )
    assert r.status_code == 200, r.text
    await link_alice(client, acme)
    r = await client.put(
        f"/api/v1/workspaces/{acme.slug}/directory/teams/physics",
        json={"contactEmail": "lead@physics.example"},
        headers=acme.auth(),
    )
    assert r.status_code == 200, r.text
    enrolled = await enroll(client, acme, "node-a")
    return str(enrolled["agentToken"]), str(enrolled["hostId"])


async def walk(
    app: Any,
    client: httpx.AsyncClient,
    agent: str,
    t0: datetime,
    minutes: range,
    state: str,
    log: list[str],
) -> None:
    """One observation a minute and a pass 10 s after each; what opened and closed."""
    detect = notices_of(app).detect_once
    for minute in minutes:
        when = t0 + minute * MINUTE
        await at(client, agent, when, state)
        result = (await detect(when + 10 * S))["acme"]
        log += [f"{minute}:{k}" for k in result.opened + result.closed if k.startswith("job.")]


async def test_told_escalated_once_and_resolved(app: Any, client: Any, smtp: SmtpReceiver) -> None:
    acme = await make_tenant(app, "acme")
    agent, host = await setup(client, acme)
    t0 = start_of_run()
    job = await add_job(app, host, [0], started=t0 - 5 * MINUTE, name="<b>train</b>\nX")
    log: list[str] = []
    # Unused from t0 (the GPU's first observation), idle-held by alice from t0+14: still
    # the same episode; active from t0+24.
    await walk(app, client, agent, t0, range(14), "idle", log)
    await walk(app, client, agent, t0, range(14, 24), "idle_held", log)
    await walk(app, client, agent, t0, range(24, 28), "active", log)
    # Told at 10 min of the run (t0), escalated at 20 min of the episode, resolved once
    # active for the pass's 2 minutes.
    assert log == ["10:job.idle", "20:job.idle.escalated", "26:job.idle.resolved"]
    told = await events(app, "job.idle")
    assert [e[2]["data"]["escalated"] for e in told] == [False, True]
    data = told[0][2]["data"]
    assert data["job"]["publicId"] == job
    assert data["job"]["jobId"] == "4711"
    assert data["job"]["name"] == "<b>train</b>\nX"
    assert data["memberEmails"] == ["member@acme.example"]
    assert data["gpus"] == [
        {
            "host": {"hostId": host, "displayName": "node-a", "hostname": "node"},
            "gpu": {"uuid": "GPU-0", "index": 0, "name": "NVIDIA A100"},
            "standing": "unused",
            "since": t0.isoformat(),
        }
    ]
    assert data["url"] == f"http://board.test/w/acme/jobs/{job}"
    assert told[1][2]["data"]["escalatedTo"] == ["admin@acme.example", "lead@physics.example"]

    async def all_sent() -> bool:
        return len(smtp.messages) == 6

    await deliver_until(app, all_sent, "the notice, its escalation and the resolved, one mail each")
    sent = {tuple(rcpt): message for rcpt, message in smtp.messages}
    assert (
        set(sent)
        == {
            ("member@acme.example",),
            ("admin@acme.example",),
            ("lead@physics.example",),
        }
        or len(smtp.messages) == 3
    )
    recipients = sorted(r for rcpt, _ in smtp.messages for r in rcpt)
    # The user: told and resolved; the contact and the admin: escalated and resolved.
    assert recipients.count("member@acme.example") == 2
    assert recipients.count("lead@physics.example") == 2
    assert recipients.count("admin@acme.example") == 2
    first = next(m for rcpt, m in smtp.messages if rcpt == ["member@acme.example"])
    assert "job 4711" in first["Subject"]
    text = first.get_payload(decode=True).decode()
    # The job's hostile name stays on its line.
    assert "<b>train</b> X" in text
    assert f"http://board.test/w/acme/jobs/{job}" in text


async def test_a_job_that_ends_resolves_and_maintenance_tells_nothing(
    app: Any, client: Any
) -> None:
    acme = await make_tenant(app, "acme")
    agent, host = await setup(client, acme)
    t0 = start_of_run()
    await add_job(app, host, [0], started=t0)
    log: list[str] = []
    await walk(app, client, agent, t0, range(12), "idle", log)
    assert log == ["10:job.idle"]
    # The job ends at t0+12: the allocation is no longer in force.
    await execute(
        app,
        "UPDATE scheduler_jobs SET ended_at = %s, state = 'COMPLETED'",
        t0 + 12 * MINUTE,
    )
    await execute(
        app, "UPDATE job_gpus SET during = tstzrange(lower(during), %s)", t0 + 12 * MINUTE
    )
    await walk(app, client, agent, t0, range(12, 16), "idle", log)
    assert log == ["10:job.idle", "14:job.idle.resolved"]

    # Another job on a host inside a maintenance window: nothing, however long.
    await add_job(app, host, [0], started=t0 + 16 * MINUTE, job_id="4712")
    made = await client.post(
        f"/api/v1/workspaces/acme/hosts/{host}/maintenance",
        json={
            "start": (t0 + 15 * MINUTE).isoformat(),
            "end": (t0 + 60 * MINUTE).isoformat(),
            "note": "drain",
        },
        headers=acme.auth(),
    )
    assert made.status_code == 201, made.text
    await walk(app, client, agent, t0, range(16, 40), "idle", log)
    assert log == ["10:job.idle", "14:job.idle.resolved"]


async def test_the_thresholds_are_settings(client: Any, app: Any) -> None:
    acme = await make_tenant(app, "acme")
    url = "/api/v1/workspaces/acme/settings"
    got = (await client.get(url, headers=acme.auth("member"))).json()
    assert (got["jobIdleNoticeMinutes"], got["jobIdleEscalateMinutes"]) == (60, 105)
    for body, words in [
        ({"jobIdleEscalateMinutes": 60}, "must be more than"),
        ({"jobIdleNoticeMinutes": 120}, "must be more than"),
        ({"jobIdleNoticeMinutes": 0}, "from 1 to 10080"),
        ({"jobIdleEscalateMinutes": "90"}, "from 2 to 10080"),
    ]:
        r = await client.patch(url, json=body, headers=acme.auth())
        assert r.status_code == 422, r.text
        assert words in r.json()["detail"]
    r = await client.patch(url, json={"jobIdleNoticeMinutes": 30}, headers=acme.auth("member"))
    assert r.status_code == 403
    r = await client.patch(
        url, json={"jobIdleNoticeMinutes": 120, "jobIdleEscalateMinutes": 180}, headers=acme.auth()
    )
    assert r.status_code == 200, r.text
    assert (r.json()["jobIdleNoticeMinutes"], r.json()["jobIdleEscalateMinutes"]) == (120, 180)
