"""A process's scheduler job (our agent's `jobId`, read from its cgroup) decides whose a
GPU is where the allocation alone cannot: two runs of one user sharing a GPU. Stored in
the raw samples, kept in the compacted hours, shown in the hosts API, and a rebuild from
raw credits it exactly as ingest did; the released agent, naming no job, is counted by
user as before."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from board.observations.compaction import CompactionResult, compact_day
from board.reservations.rebuild import rebuild_hours
from tests.board.builders import push
from tests.board.job_builders import MINUTE, connect, job, job_figures, outside_hours, record
from tests.board.test_jobs_crediting import host
from tests.board.test_reports_builders import (
    days_ago_midnight,
    gpu,
    observation,
    proc,
    quick_tenant,
)

HOUR = timedelta(hours=1)
M = 60 * 10**6


def alice_on_gpu0(*jobs: str | None) -> list[dict[str, Any]]:
    """GPU 0 active with one process of alice per job named (None: names none)."""
    procs = []
    for named in jobs:
        p = proc("alice")
        if named is not None:
            p["jobId"] = named
        procs.append(p)
    return [gpu(0, util=90, state="active", procs=procs), gpu(1, util=0, state="idle")]


async def pushes(client: Any, token: str, start: Any, minutes: int, *jobs: str | None) -> None:
    for i in range(minutes):
        body = observation(start + i * MINUTE, alice_on_gpu0(*jobs))
        r = await push(client, token, body)
        assert r.status_code == 202, r.text


def by_job(figures: dict[Any, tuple[int, ...]]) -> dict[str, tuple[int, int, int]]:
    """raw job id -> (covered, active, foreign) µs."""
    found: dict[str, tuple[int, int, int]] = {}
    for key, row in figures.items():
        covered, active, foreign = found.get(key[0], (0, 0, 0))
        found[key[0]] = (covered + row[0], active + row[1], foreign + row[3])
    return found


async def test_a_process_names_which_of_two_runs_of_its_user_uses_the_gpu(app, client) -> None:
    tenant = await quick_tenant(app, "pjob")
    ws, host_id, token = await host(app, client, tenant, "node-1")
    start = days_ago_midnight(1) + 2 * HOUR
    # Two runs of alice given GPU 0 at once (a shared GPU), both running.
    await record(
        app,
        ws,
        job("10", start, None, {host_id: (0,)}),
        job("11", start, None, {host_id: (0,)}),
    )
    # 3 minutes: alice's process runs in job 10; 2 more: one in each; 2 more: one that
    # names no job (a login shell's process), and one of job 11.
    await pushes(client, token, start, 3, "10")
    await pushes(client, token, start + 3 * MINUTE, 2, "10", "11")
    await pushes(client, token, start + 5 * MINUTE, 3, None, "11")

    figures = by_job(await job_figures(app, ws))
    # Intervals [0,1) … [6,7): job 10 is used in the first 5, job 11 from minute 3 on;
    # where a process names no job, both may be its (counted for both, as before jobIds).
    assert figures["10"] == (7 * M, 7 * M, 0)
    assert figures["11"] == (7 * M, 4 * M, 3 * M)

    # The hosts API shows each process's job; GPU 0's card names the run its processes
    # are in, and stands for it.
    r = await client.get(f"/api/v1/workspaces/{tenant.slug}/hosts", headers=tenant.auth())
    assert r.status_code == 200, r.text
    (shown,) = r.json()["hosts"]
    gpu0 = next(g for g in shown["gpus"] if g["index"] == 0)
    assert sorted((p["jobId"] or "") for p in gpu0["processes"]) == ["", "11"]

    # A rebuild from raw credits what ingest did, hot rows and compacted hours alike.
    credited = (await job_figures(app, ws), await outside_hours(app, ws))
    midnight = days_ago_midnight(1)
    async with await connect(app) as conn:
        async with conn.transaction():
            await rebuild_hours(conn, ws, midnight, midnight + 6 * HOUR)
    assert (await job_figures(app, ws), await outside_hours(app, ws)) == credited
    async with await connect(app) as conn:
        await conn.set_autocommit(True)
        await compact_day(conn, midnight.date(), CompactionResult([midnight.date()]))
        left = await conn.execute(
            "SELECT count(*) FROM host_observations WHERE workspace_id = %s", [ws]
        )
        assert (await left.fetchone()) == (0,)
        await conn.set_autocommit(False)
        async with conn.transaction():
            await rebuild_hours(conn, ws, midnight, midnight + 6 * HOUR)
    assert (await job_figures(app, ws), await outside_hours(app, ws)) == credited


async def test_processes_of_another_job_are_not_the_runs_own(app, client) -> None:
    """One run on GPU 0; alice's only process there is in another job of hers (placed on
    the wrong GPU): the run's GPU is someone else's, not used by it."""
    tenant = await quick_tenant(app, "pjob")
    ws, host_id, token = await host(app, client, tenant, "node-1")
    start = days_ago_midnight(1) + 2 * HOUR
    await record(app, ws, job("20", start, None, {host_id: (0,)}))
    await pushes(client, token, start, 4, "21")
    assert by_job(await job_figures(app, ws))["20"] == (3 * M, 0, 3 * M)


async def test_the_released_agent_names_no_job_and_both_runs_count_it(app, client) -> None:
    tenant = await quick_tenant(app, "pjob")
    ws, host_id, token = await host(app, client, tenant, "node-1")
    start = days_ago_midnight(1) + 2 * HOUR
    await record(
        app,
        ws,
        job("30", start, None, {host_id: (0,)}),
        job("31", start, None, {host_id: (0,)}),
    )
    await pushes(client, token, start, 3, None)
    figures = by_job(await job_figures(app, ws))
    assert figures["30"] == figures["31"] == (2 * M, 2 * M, 0)
    async with await connect(app) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM host_observations WHERE workspace_id = %s "
            "AND process_job_id IS NOT NULL",
            [ws],
        )
        assert (await cur.fetchone()) == (0,)  # nothing stored for it


def test_the_live_standing_follows_the_named_job() -> None:
    """The card and the job.idle notice read the same rule from the newest tick."""
    from datetime import UTC, datetime
    from uuid import uuid4

    from board.jobs.live import JobRun, job_now, run_named

    at = datetime(2026, 12, 1, tzinfo=UTC)

    def run(raw: str) -> JobRun:
        return JobRun(1, uuid4(), "hpc", raw, "alice", "a", "p", "n", "RUNNING", at, 1, 1, "G", raw)

    first, second = run("40"), run("41")
    pairs = (("alice", "41"),)
    assert run_named([first, second], pairs) is second
    assert job_now(first, "active", ("alice",), at, pairs).standing == "foreign"
    assert job_now(first, "active", ("alice",), at, pairs).foreign_users == ("alice",)
    assert job_now(second, "active", ("alice",), at, pairs).standing == "active"
    # No job named (the released agent): by user, the oldest run.
    assert run_named([first, second], ()) is first
    assert job_now(first, "idle_held", ("alice",), at, ()).standing == "idle_held"
