"""The jobs in force now (board.jobs.live): each GPU's job in the hosts API and how the
GPU stands for it: unused, idle-held, active, foreign, and since when (the GPU's run,
clipped to the job's start); an ended job holds nothing; devices matched by minor number
when the agent reported one, else by index."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from board.jobs.live import jobs_now, runs_in_force
from board.runtime import Runtime
from tests.board.builders import Tenant, enroll, make_tenant, push
from tests.board.db import execute
from tests.board.job_rows import add_job, host_pk, set_minor
from tests.board.test_reports_builders import gpu, observation, proc
from tests.web.helpers import sign_in

MINUTE = timedelta(minutes=1)


def card(index: int, state: str, *users: str) -> dict[str, Any]:
    if state == "idle":
        return gpu(index, util=0, state="idle")
    return gpu(
        index, util=90 if state == "active" else 0, state=state, procs=[proc(u) for u in users]
    )


async def observe(
    client: httpx.AsyncClient, agent: str, start: datetime, minutes: int, *cards: dict[str, Any]
) -> None:
    for i in range(minutes):
        r = await push(client, agent, observation(start + i * MINUTE, list(cards)))
        assert r.status_code == 202, r.text


async def host_gpus(client: httpx.AsyncClient, tenant: Tenant, role: str = "member") -> Any:
    r = await client.get(f"/api/v1/workspaces/{tenant.slug}/hosts", headers=tenant.auth(role))
    assert r.status_code == 200, r.text
    (host,) = r.json()["hosts"]
    return {g["index"]: g for g in host["gpus"]}


async def node(client: httpx.AsyncClient, tenant: Tenant) -> tuple[str, str]:
    # Fresh for an hour: the tests' observations lie minutes back.
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings",
        json={"staleAfterSeconds": 3600},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    enrolled = await enroll(client, tenant, "gpu-node-1")
    return str(enrolled["agentToken"]), str(enrolled["hostId"])


def start() -> datetime:
    return (datetime.now(UTC) - timedelta(minutes=20)).replace(second=0, microsecond=0)


async def test_standing_and_since_per_gpu(app: Any, client: httpx.AsyncClient) -> None:
    acme = await make_tenant(app, "acme")
    agent, host = await node(client, acme)
    t0 = start()
    # GPU 0 nobody; 1 alice idle-held; 2 alice busy; 3 bob busy; 4 no job.
    cards = [
        card(0, "idle"),
        card(1, "idle_held", "alice"),
        card(2, "active", "alice"),
        card(3, "active", "bob"),
        card(4, "idle"),
    ]
    await observe(client, agent, t0, 5, *cards)
    # Started before the GPUs were first seen: since is the GPU's run start (t0).
    job = await add_job(app, host, [0, 1, 2, 3], started=t0 - 30 * MINUTE)
    gpus = await host_gpus(client, acme)
    assert gpus[4]["job"] is None
    assert gpus[0]["job"] == {
        "jobId": "4711",
        "cluster": "hpc",
        "publicId": job,
        "user": "alice",
        "account": "physics",
        "standing": "unused",
        "since": t0.isoformat(),
        "foreignUsers": [],
    }
    assert gpus[1]["job"]["standing"] == "idle_held"
    assert gpus[1]["job"]["since"] == t0.isoformat()
    assert gpus[2]["job"]["standing"] == "active"
    assert gpus[3]["job"]["standing"] == "foreign"
    assert gpus[3]["job"]["foreignUsers"] == ["bob"]
    # Finance sees the job and its standing, not who else runs there.
    finance = await host_gpus(client, acme, "finance")
    assert finance[3]["job"]["standing"] == "foreign"
    assert finance[3]["job"]["foreignUsers"] is None

    # GPU 0 turns idle-held at t0+5: a new run, so a new since; GPU 1 turns active.
    later = t0 + 5 * MINUTE
    cards[0] = card(0, "idle_held", "alice")
    cards[1] = card(1, "active", "alice")
    await observe(client, agent, later, 2, *cards)
    gpus = await host_gpus(client, acme)
    assert (gpus[0]["job"]["standing"], gpus[0]["job"]["since"]) == ("idle_held", later.isoformat())
    assert (gpus[1]["job"]["standing"], gpus[1]["job"]["since"]) == ("active", later.isoformat())


async def test_since_clipped_to_the_job_start_and_an_ended_job(
    app: Any, client: httpx.AsyncClient
) -> None:
    acme = await make_tenant(app, "acme")
    agent, host = await node(client, acme)
    t0 = start()
    await observe(client, agent, t0, 10, card(0, "idle"), card(1, "idle"))
    began = t0 + 4 * MINUTE + timedelta(seconds=30)
    await add_job(app, host, [0], started=began)
    # An earlier job on GPU 1, ended: nothing in force there.
    await add_job(app, host, [1], started=t0, ended=t0 + 3 * MINUTE, job_id="4700")
    gpus = await host_gpus(client, acme)
    assert gpus[0]["job"]["since"] == began.isoformat()
    assert gpus[1]["job"] is None


async def test_devices_matched_by_minor_number_else_index(
    app: Any, client: httpx.AsyncClient
) -> None:
    acme = await make_tenant(app, "acme")
    agent, host = await node(client, acme)
    t0 = start()
    await observe(client, agent, t0, 3, card(0, "active", "alice"), card(1, "idle"))
    job = await add_job(app, host, [0], started=t0)
    # By index while no minor number is known: device 0 is GPU 0.
    gpus = await host_gpus(client, acme)
    assert gpus[0]["job"]["publicId"] == job
    assert gpus[1]["job"] is None
    # The agent reports minor numbers the other way round: device 0 is GPU 1 (idle).
    await set_minor(app, host, 0, 1)
    await set_minor(app, host, 1, 0)
    gpus = await host_gpus(client, acme)
    assert gpus[0]["job"] is None
    assert gpus[1]["job"]["standing"] == "unused"


async def test_jobs_now_reads_the_newest_ticks(app: Any, client: httpx.AsyncClient) -> None:
    """The notices' read: every run in force with its standing, one host or all; a
    stale host's GPUs are not observed (standing None)."""
    acme = await make_tenant(app, "acme")
    agent, host = await node(client, acme)
    t0 = start()
    await observe(client, agent, t0, 3, card(0, "idle_held", "alice"), card(1, "active", "bob"))
    await add_job(app, host, [0, 1], started=t0)
    runtime: Runtime = app.state.runtime
    now = datetime.now(UTC)
    async with runtime.pool.connection() as conn:
        ws = await (await conn.execute("SELECT id FROM workspaces WHERE slug = 'acme'")).fetchone()
        assert ws is not None
        found = await jobs_now(conn, ws[0], 3600, now, await host_pk(app, host))
        stale = await jobs_now(conn, ws[0], 60, now + timedelta(hours=1))
    assert [(j.run.gpu_uuid, j.standing, j.since, j.foreign_users) for j in found] == [
        ("GPU-0", "idle_held", t0, ()),
        ("GPU-1", "foreign", t0, ("bob",)),
    ]
    assert found[0].wasting
    assert not found[1].wasting
    assert [j.standing for j in stale] == [None, None]


@asynccontextmanager
async def signed_in(app: Any, email: str) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as c:
        await sign_in(c, email)
        yield c


async def test_the_card_line_and_the_job_page(app: Any, client: httpx.AsyncClient) -> None:
    """The GPU card says the job, its user and the standing, linked to the job's page; the
    page shows the fields, the allocation, the figures summed from job_hour_figures and
    the timeline; every hostile string escaped; another workspace's job is a 404; finance
    reads the page without who else runs on the GPU."""
    acme = await make_tenant(app, "acme")
    await make_tenant(app, "other")
    agent, host = await node(client, acme)
    t0 = start()
    await observe(client, agent, t0, 5, card(0, "idle"), card(1, "active", "bob"))
    hostile = '<script>alert("x")</script>'
    job = await add_job(app, host, [0, 1], started=t0, name=hostile, account="<b>phys</b>")
    await execute(
        app,
        "INSERT INTO job_hour_figures (workspace_id, job_id, gpu_id, hour_start, host_id, "
        "covered_us, active_us, idle_held_us, foreign_us, unused_us, util_pct_us, "
        "max_memory_used_mb) "
        "SELECT j.workspace_id, j.id, g.id, date_trunc('hour', %s::timestamptz), g.host_id, "
        "1800000000, 0, 0, 900000000, 900000000, 0, 2048 "
        "FROM scheduler_jobs j JOIN gpus g ON g.workspace_id = j.workspace_id "
        "WHERE j.public_id = %s AND g.gpu_index = 0",
        t0,
        job,
    )
    await sign_in(client, "member@acme.example")
    fleet = await client.get("/w/acme/")
    assert fleet.status_code == 200
    assert f'href="/w/acme/jobs/{job}"' in fleet.text
    assert "job 4711</a> · alice · " in fleet.text
    assert 'data-job-standing="unused"' in fleet.text
    assert "foreign: bob" in fleet.text
    page = await client.get(f"/w/acme/hosts/{host}")
    assert 'data-job-standing="unused"' in page.text
    assert "unused</span> for <span data-since=" in page.text

    shown = await client.get(f"/w/acme/jobs/{job}")
    assert shown.status_code == 200
    assert hostile not in shown.text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in shown.text
    assert "&lt;b&gt;phys&lt;/b&gt;" in shown.text
    assert '<td data-label="Wasted" data-field="wasted">0.25</td>' in shown.text
    assert 'data-standing="unused"' in shown.text
    assert ": bob" in shown.text
    assert "<svg" in shown.text
    for missing in ("00000000-0000-0000-0000-000000000000", "not-a-uuid", "x" * 64):
        assert (await client.get(f"/w/acme/jobs/{missing}")).status_code == 404
    assert (await client.get(f"/w/acme/jobs/{'x' * 65}")).status_code in (404, 422)

    # Another workspace's admin: 404, nothing of the job.
    async with signed_in(app, "admin@other.example") as outsider:
        other_job = await outsider.get(f"/w/other/jobs/{job}")
        assert other_job.status_code == 404
        assert "4711" not in other_job.text

    async with signed_in(app, "finance@acme.example") as finance_client:
        finance = await finance_client.get(f"/w/acme/jobs/{job}")
    assert finance.status_code == 200
    assert ": bob" not in finance.text
    assert '<td data-label="Wasted" data-field="wasted">0.25</td>' in finance.text


async def test_runs_in_force_at_the_bounds_of_during(app: Any, client: httpx.AsyncClient) -> None:
    """runs_in_force finds the runs by the end of `during` (an index) as well as by
    `during @> now`: the same runs as the containment alone, at every bound."""
    acme = await make_tenant(app, "acme")
    agent, host = await node(client, acme)
    await observe(client, agent, start(), 1, *(card(i, "idle") for i in range(6)))
    now = datetime.now(UTC).replace(microsecond=0)
    tick = timedelta(microseconds=1)
    # (GPU, during as its bounds): in force at `now` or not.
    runs = {
        0: ("[)", now - MINUTE, None),  # running: in force
        1: ("[)", now - MINUTE, now),  # ended at now (exclusive): not
        2: ("[)", now - MINUTE, now + tick),  # ends just after: in force
        3: ("[]", now - MINUTE, now),  # an inclusive end at now: in force
        4: ("[)", now + tick, None),  # starts after now: not
        5: ("[)", now - 2 * MINUTE, now - MINUTE),  # ended before: not
    }
    for device, (bounds, lower, upper) in runs.items():
        await add_job(app, host, [device], started=lower, job_id=f"48{device}")
        await execute(
            app,
            "UPDATE job_gpus SET during = tstzrange(%s, %s, %s) WHERE device = %s AND host_id = %s",
            lower,
            upper,
            bounds,
            device,
            await host_pk(app, host),
        )
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        ws = await (await conn.execute("SELECT id FROM workspaces WHERE slug = 'acme'")).fetchone()
        assert ws is not None
        cur = await conn.execute(
            "SELECT device FROM job_gpus WHERE workspace_id = %s AND during @> %s ORDER BY 1",
            [ws[0], now],
        )
        contained = [r[0] for r in await cur.fetchall()]
        found = await runs_in_force(conn, ws[0], [await host_pk(app, host)], now)
    assert contained == [0, 2, 3]
    assert sorted(found) == [(await host_pk(app, host), f"GPU-{d}") for d in contained]
