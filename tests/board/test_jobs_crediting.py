"""How a job's GPU time is counted (docs/jobs.md), hand-computed minute by minute.

One observation a minute; an interval counts from its opener until the next one, so
`kinds[i]` is what the GPU did during minute i. Jobs go through board.jobs.service
(store, then credit the difference), the observations through the agent API.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx

from board.reservations.rebuild import rebuild_hours
from tests.board.builders import Tenant, enroll, push
from tests.board.job_builders import (
    MINUTE,
    M,
    connect,
    ids,
    job,
    job_figures,
    kind_gpu,
    outside_hours,
    record,
    totals,
)
from tests.board.test_reports_builders import days_ago_midnight, observation, quick_tenant

HOUR = timedelta(hours=1)


async def series(
    client: httpx.AsyncClient,
    token: str,
    start: datetime,
    kinds: list[str | tuple[str, ...]],
    used: int = 1000,
) -> None:
    """Observation i at start + i minutes, GPU k in kinds[i][k] (one kind: GPU 0)."""
    for i, kind in enumerate(kinds):
        per_gpu = (kind,) if isinstance(kind, str) else kind
        body = observation(
            start + i * MINUTE, [kind_gpu(k, g, used=used) for k, g in enumerate(per_gpu)]
        )
        r = await push(client, token, body)
        assert r.status_code == 202, r.text


async def host(
    app: Any, client: httpx.AsyncClient, tenant: Tenant, name: str
) -> tuple[int, int, str]:
    enrolled = await enroll(client, tenant, name)
    ws, host_id = await ids(app, tenant, enrolled["hostId"])
    return ws, host_id, enrolled["agentToken"]


def start_at() -> datetime:
    return days_ago_midnight(1) + 10 * MINUTE


async def test_a_gpu_held_by_the_scheduler_and_unused_the_whole_time(app, client) -> None:
    tenant = await quick_tenant(app, "jobs")
    ws, h, token = await host(app, client, tenant, "n1")
    s = start_at()
    await record(app, ws, job("100", s, s + 10 * MINUTE, {h: (0,)}))
    await series(client, token, s - 2 * MINUTE, ["unused"] * 15)
    assert totals(await job_figures(app, ws)) == {"100": (10 * M, 0, 0, 0, 10 * M, 0, 1000)}
    assert await outside_hours(app, ws) == {}


async def test_idle_held_then_active_and_recorded_after_its_observations(app, client) -> None:
    tenant = await quick_tenant(app, "jobs")
    ws, h, token = await host(app, client, tenant, "n1")
    s = start_at()
    kinds: list[str | tuple[str, ...]] = ["unused"] + ["idle_held"] * 5 + ["active"] * 5
    await record(app, ws, job("101", s, s + 10 * MINUTE, {h: (0,)}))
    await series(client, token, s - MINUTE, [*kinds, "unused", "unused"], used=3000)
    expected = (10 * M, 5 * M, 5 * M, 0, 0, 80 * 5 * M, 3000)
    assert totals(await job_figures(app, ws)) == {"101": expected}
    # The same history with the job recorded once it has all been observed (a job
    # already running when the board was installed): re-credited from the raw samples.
    ws2, h2, token2 = await host(app, client, tenant, "n2")
    await series(client, token2, s - MINUTE, [*kinds, "unused", "unused"], used=3000)
    assert totals(await job_figures(app, ws2)) == {"101": expected}
    await record(app, ws2, job("102", s, s + 10 * MINUTE, {h2: (0,)}))
    assert totals(await job_figures(app, ws2)) == {"101": expected, "102": expected}


async def test_someone_elses_process_is_foreign_and_outside_their_jobs(app, client) -> None:
    tenant = await quick_tenant(app, "jobs")
    ws, h, token = await host(app, client, tenant, "n1")
    s = start_at()
    await record(app, ws, job("103", s, s + 10 * MINUTE, {h: (0,)}))
    await series(client, token, s, ["foreign"] * 10 + ["unused"])
    assert totals(await job_figures(app, ws)) == {"103": (10 * M, 0, 0, 10 * M, 0, 800 * M, 1000)}
    hour = s.replace(minute=0)
    assert await outside_hours(app, ws) == {(h, 0, "bob", hour): 10 * M}


async def test_a_job_ending_mid_hour_across_an_hour_boundary(app, client) -> None:
    tenant = await quick_tenant(app, "jobs")
    ws, h, token = await host(app, client, tenant, "n1")
    midnight = days_ago_midnight(1)
    s = midnight - 30 * MINUTE
    await record(app, ws, job("104", s, midnight + 15 * MINUTE, {h: (0,)}))
    await series(client, token, s - MINUTE, ["active"] * 52)
    figures = await job_figures(app, ws)
    assert figures == {
        ("104", 0, h, 0, midnight - HOUR): (30 * M, 30 * M, 0, 0, 0, 80 * 30 * M, 1000),
        ("104", 0, h, 0, midnight): (15 * M, 15 * M, 0, 0, 0, 80 * 15 * M, 1000),
    }
    # Alice's own GPU after her job ended is held outside any job of hers; before the job
    # the host was no cluster host yet (since = the first job's start).
    outside = await outside_hours(app, ws)
    assert outside == {(h, 0, "alice", midnight): 5 * M}


async def test_two_gpus_and_alice_on_a_gpu_not_given_to_her(app, client) -> None:
    tenant = await quick_tenant(app, "jobs")
    ws, h, token = await host(app, client, tenant, "n1")
    s = start_at()
    await record(app, ws, job("105", s, s + 10 * MINUTE, {h: (0, 1)}))
    minute: tuple[str, ...] = ("active", "unused", "active")
    after: tuple[str, ...] = ("unused", "unused", "active")
    await series(client, token, s, [minute] * 10 + [after] * 3)
    figures = await job_figures(app, ws)
    hour = s.replace(minute=0)
    assert figures == {
        ("105", 0, h, 0, hour): (10 * M, 10 * M, 0, 0, 0, 800 * M, 1000),
        ("105", 0, h, 1, hour): (10 * M, 0, 0, 0, 10 * M, 0, 1000),
    }
    assert await outside_hours(app, ws) == {(h, 2, "alice", hour): 12 * M}


async def test_a_job_on_two_hosts(app, client) -> None:
    tenant = await quick_tenant(app, "jobs")
    ws, h1, token1 = await host(app, client, tenant, "n1")
    _, h2, token2 = await host(app, client, tenant, "n2")
    s = start_at()
    await record(app, ws, job("106", s, s + 10 * MINUTE, {h1: (0,), h2: (0,)}))
    await series(client, token1, s, ["idle_held"] * 11)
    await series(client, token2, s, ["active"] * 4 + ["unused"] * 7)
    hour = s.replace(minute=0)
    assert await job_figures(app, ws) == {
        ("106", 0, h1, 0, hour): (10 * M, 0, 10 * M, 0, 0, 0, 1000),
        ("106", 0, h2, 0, hour): (10 * M, 4 * M, 0, 0, 6 * M, 320 * M, 1000),
    }


async def test_a_requeued_run_is_a_second_run(app, client) -> None:
    tenant = await quick_tenant(app, "jobs")
    ws, h, token = await host(app, client, tenant, "n1")
    s = start_at()
    first = job("107", s, s + 5 * MINUTE, {h: (0,)}, state="REQUEUED")
    second = job("107", s + 7 * MINUTE, s + 12 * MINUTE, {h: (0,)}, restart=1)
    await record(app, ws, first, second)
    await series(client, token, s, ["active"] * 14)
    hour = s.replace(minute=0)
    assert await job_figures(app, ws) == {
        ("107", 0, h, 0, hour): (5 * M, 5 * M, 0, 0, 0, 400 * M, 1000),
        ("107", 1, h, 0, hour): (5 * M, 5 * M, 0, 0, 0, 400 * M, 1000),
    }
    # Between the runs, and after the second, alice's process ran outside any job.
    assert await outside_hours(app, ws) == {(h, 0, "alice", hour): (2 + 1) * M}


async def test_an_end_time_arriving_later_takes_back_what_follows_it(app, client) -> None:
    tenant = await quick_tenant(app, "jobs")
    ws, h, token = await host(app, client, tenant, "n1")
    s = start_at()
    await record(app, ws, job("108", s, None, {h: (0,)}))
    await series(client, token, s - MINUTE, ["active"] * 14)
    hour = s.replace(minute=0)
    running = (12 * M, 12 * M, 0, 0, 0, 80 * 12 * M, 1000)
    assert totals(await job_figures(app, ws)) == {"108": running}
    assert await outside_hours(app, ws) == {}
    await record(app, ws, job("108", s, s + 6 * MINUTE, {h: (0,)}))
    assert totals(await job_figures(app, ws)) == {"108": (6 * M, 6 * M, 0, 0, 0, 480 * M, 1000)}
    assert await outside_hours(app, ws) == {(h, 0, "alice", hour): 6 * M}
    # Moved back again: exactly what it was.
    await record(app, ws, job("108", s, None, {h: (0,)}))
    assert totals(await job_figures(app, ws)) == {"108": running}
    assert await outside_hours(app, ws) == {}


async def test_rebuild_from_raw_gives_what_ingest_and_records_credited(app, client) -> None:
    tenant = await quick_tenant(app, "jobs")
    ws, h, token = await host(app, client, tenant, "n1")
    midnight = days_ago_midnight(1)
    s = midnight - 20 * MINUTE
    await record(app, ws, job("109", s, None, {h: (0, 1)}))
    kinds: list[str | tuple[str, ...]] = [("active", "foreign", "idle_held")] * 15
    kinds += [("idle_held", "unused", "active")] * 15 + [("foreign", "active", "unused")] * 15
    await series(client, token, s - 3 * MINUTE, kinds)
    await record(app, ws, job("109", s, midnight + 10 * MINUTE, {h: (0, 1)}))
    await record(app, ws, job("110", midnight, None, {h: (2,)}, user="bob"))
    credited = (await job_figures(app, ws), await outside_hours(app, ws))
    assert credited[0]
    assert credited[1]
    async with await connect(app) as conn:
        async with conn.transaction():
            await rebuild_hours(conn, ws, midnight - 2 * HOUR, midnight + 2 * HOUR)
    assert (await job_figures(app, ws), await outside_hours(app, ws)) == credited
