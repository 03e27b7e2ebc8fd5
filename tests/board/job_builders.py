"""Builders for the job crediting tests: records taken through the service, figures read."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

import psycopg

from board.db.urls import libpq_url
from board.jobs.records import HostAllocation, JobRecord
from board.jobs.service import record_jobs
from board.runtime import Runtime
from tests.board.builders import Tenant
from tests.board.test_reports_builders import gpu, proc

MINUTE = timedelta(minutes=1)
M = 60_000_000  # a minute in µs


async def connect(app: Any) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(
        libpq_url(app.state.runtime.database_url), autocommit=True
    )


async def ids(app: Any, tenant: Tenant, host_public_id: str) -> tuple[int, int]:
    """(workspace id, host id) of an enrolled host."""
    async with await connect(app) as conn:
        cur = await conn.execute(
            "SELECT h.workspace_id, h.id FROM hosts h JOIN workspaces w ON w.id = h.workspace_id "
            "WHERE w.slug = %s AND h.public_id = %s",
            [tenant.slug, host_public_id],
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def job(
    raw_id: str,
    start: datetime,
    end: datetime | None,
    allocations: dict[int, tuple[int, ...]],
    *,
    user: str = "alice",
    restart: int = 0,
    state: str | None = None,
) -> JobRecord:
    return JobRecord(
        cluster="hpc",
        raw_job_id=raw_id,
        restart_count=restart,
        job_id=raw_id,
        linux_user=user,
        account="physics",
        partition="gpu",
        name="train",
        state=state or ("RUNNING" if end is None else "COMPLETED"),
        started_at=start,
        ended_at=end,
        allocations=tuple(HostAllocation(h, d) for h, d in allocations.items()),
    )


async def record(app: Any, workspace_id: int, *records: JobRecord) -> None:
    runtime: Runtime = app.state.runtime
    async with runtime.sessions() as session:
        await record_jobs(session, workspace_id, records)
        await session.commit()


def kind_gpu(index: int, kind: str, *, util: int = 80, used: int = 1000) -> dict[str, Any]:
    """GPU `index` as the four classes see it, for a job of alice."""
    if kind == "active":
        return gpu(index, util=util, state="active", procs=[proc("alice")], used=used)
    if kind == "idle_held":
        return gpu(index, util=0, state="idle_held", procs=[proc("alice")], used=used)
    if kind == "foreign":
        return gpu(index, util=util, state="active", procs=[proc("bob")], used=used)
    return gpu(index, util=0, state="idle", procs=[], used=used)


Figures = dict[tuple[str, int, int, int, datetime], tuple[int, ...]]


async def job_figures(app: Any, workspace_id: int) -> Figures:
    """(raw job id, restart, host id, gpu index, hour) -> covered, active, idle_held,
    foreign, unused, util_pct_us, max_memory_used_mb (rows of all zero µs left out),
    wherever an hour is kept (job_hours: a figure row, or the GPU-hour row's job sums)."""
    async with await connect(app) as conn:
        cur = await conn.execute(
            "SELECT j.raw_job_id, j.restart_count, f.host_id, g.gpu_index, f.hour_start, "
            "sum(f.covered_us)::bigint, sum(f.active_us)::bigint, "
            "sum(f.idle_held_us)::bigint, sum(f.foreign_us)::bigint, "
            "sum(f.unused_us)::bigint, sum(f.util_pct_us)::bigint, "
            "max(f.max_memory_used_mb) FROM job_hours f "
            "JOIN scheduler_jobs j ON j.workspace_id = f.workspace_id AND j.id = f.job_id "
            "JOIN gpus g ON g.workspace_id = f.workspace_id AND g.id = f.gpu_id "
            "WHERE f.workspace_id = %s GROUP BY 1, 2, 3, 4, 5",
            [workspace_id],
        )
        rows = await cur.fetchall()
    return {(r[0], r[1], r[2], r[3], r[4]): tuple(r[5:]) for r in rows if any(r[5:11])}


def totals(figures: Figures) -> dict[str, tuple[int, ...]]:
    """Per raw job id: the six µs sums over all its GPUs and hours, and the max memory."""
    sums: dict[str, list[int]] = defaultdict(lambda: [0] * 7)
    for (raw_id, *_), row in figures.items():
        acc = sums[raw_id]
        for i in range(6):
            acc[i] += row[i]
        acc[6] = max(acc[6], row[6])
    return {k: tuple(v) for k, v in sums.items()}


async def outside_hours(app: Any, workspace_id: int) -> dict[tuple[int, int, str, datetime], int]:
    """(host id, gpu index, user, hour) -> outside µs (zero rows left out)."""
    async with await connect(app) as conn:
        cur = await conn.execute(
            "SELECT o.host_id, g.gpu_index, o.linux_user, o.hour_start, o.outside_us "
            "FROM outside_job_hours o "
            "JOIN gpus g ON g.workspace_id = o.workspace_id AND g.id = o.gpu_id "
            "WHERE o.workspace_id = %s AND o.outside_us <> 0",
            [workspace_id],
        )
        return {(r[0], r[1], r[2], r[3]): r[4] for r in await cur.fetchall()}
