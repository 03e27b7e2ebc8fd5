"""The jobs list (GET …/jobs): the runs that overlap a window, with their allocations and
the GPUs their devices match now (minor number when the agent reported one, else index)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.jobs.schemas import JobAllocationOut, JobGpuOut, JobList, JobOut

DEFAULT_LIMIT = 1_000
MAX_LIMIT = 5_000
# Devices an answer lists at most, over all its runs: a run holds up to 64 per host, on
# as many hosts as the workspace has, so 5,000 runs of a large allocation were tens of
# millions of objects in one answer (a worker's memory). The runs that would pass it are
# left out (`truncated`), never the first: every answer lists at least one run.
MAX_DEVICES = 200_000

# Overlapping [from, to): running during it, or started in it (a run of no length too).
_RUNS = """
    SELECT id, cluster, job_id, raw_job_id, restart_count, linux_user, account, partition,
           name, state, started_at, ended_at,
           (SELECT count(*) FROM job_gpus jg
            WHERE jg.workspace_id = j.workspace_id AND jg.job_id = j.id) AS devices
    FROM scheduler_jobs j
    WHERE workspace_id = %(ws)s AND started_at < %(to)s
      AND (ended_at IS NULL OR ended_at > %(from)s OR started_at >= %(from)s)
      AND (%(user)s::text IS NULL OR linux_user = %(user)s)
      AND (%(account)s::text IS NULL OR account = %(account)s)
      AND (%(state)s::text IS NULL OR state = %(state)s)
    ORDER BY started_at, cluster, raw_job_id, restart_count
    LIMIT %(limit)s
"""

# One GPU per device: a host may keep rows of GPUs it no longer has (a card replaced at
# the same index); the one matched by minor number, else the newest seen, is shown.
_ALLOCATIONS = """
    SELECT DISTINCT ON (jg.job_id, h.display_name, h.id, jg.device)
           jg.job_id, h.public_id, h.display_name, jg.device, g.uuid, g.gpu_index
    FROM job_gpus jg
    JOIN hosts h ON h.workspace_id = jg.workspace_id AND h.id = jg.host_id
    LEFT JOIN gpus g ON g.workspace_id = jg.workspace_id AND g.host_id = jg.host_id
                    AND coalesce(g.minor_number, g.gpu_index) = jg.device
    WHERE jg.workspace_id = %(ws)s AND jg.job_id = ANY(%(jobs)s::bigint[])
    ORDER BY jg.job_id, h.display_name, h.id, jg.device,
             (g.minor_number IS NOT NULL) DESC, g.first_seen_at DESC
"""


@dataclass(frozen=True)
class JobFilter:
    start: datetime
    end: datetime
    user: str | None
    account: str | None
    state: str | None
    limit: int


async def list_jobs(session: AsyncSession, workspace_id: int, wanted: JobFilter) -> JobList:
    conn = await report_connection(session)
    cur = await conn.execute(
        _RUNS,
        {
            "ws": workspace_id,
            "from": wanted.start,
            "to": wanted.end,
            "user": wanted.user,
            "account": wanted.account,
            "state": wanted.state,
            "limit": wanted.limit + 1,
        },
    )
    runs, truncated = _within_bounds(await cur.fetchall(), wanted.limit)
    allocations = await _allocations(conn, workspace_id, [int(r[0]) for r in runs])
    return JobList(
        jobs=[
            JobOut(
                cluster=cluster,
                job_id=job_id,
                raw_job_id=raw,
                restart_count=restarts,
                user=user,
                account=account,
                partition=partition,
                name=name,
                state=state,
                started_at=started,
                ended_at=ended,
                allocations=allocations.get(int(run_id), []),
            )
            for (
                run_id,
                cluster,
                job_id,
                raw,
                restarts,
                user,
                account,
                partition,
                name,
                state,
                started,
                ended,
                _,
            ) in runs
        ],
        truncated=truncated,
    )


def _within_bounds(runs: list[Any], limit: int) -> tuple[list[Any], bool]:
    """The first runs, at most `limit` of them and MAX_DEVICES devices in all (the first
    run whatever its size); True when some were left out."""
    devices = 0
    for taken, run in enumerate(runs[:limit]):
        devices += int(run[-1])
        if taken and devices > MAX_DEVICES:
            return runs[:taken], True
    return runs[:limit], len(runs) > limit


async def _allocations(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, run_ids: list[int]
) -> dict[int, list[JobAllocationOut]]:
    if not run_ids:
        return {}
    cur = await conn.execute(_ALLOCATIONS, {"ws": workspace_id, "jobs": run_ids})
    # Rows come by run, then host: each run's hosts in order, each host's devices.
    hosts: dict[int, dict[str, tuple[str, list[JobGpuOut]]]] = {}
    for run_id, host_public_id, display_name, device, gpu_uuid, gpu_index in await cur.fetchall():
        by_host = hosts.setdefault(int(run_id), {})
        _, gpus = by_host.setdefault(str(host_public_id), (display_name, []))
        gpus.append(JobGpuOut(device=device, gpu_uuid=gpu_uuid, gpu_index=gpu_index))
    return {
        run_id: [
            JobAllocationOut(host_id=host_id, display_name=name, gpus=gpus)
            for host_id, (name, gpus) in by_host.items()
        ]
        for run_id, by_host in hosts.items()
    }
