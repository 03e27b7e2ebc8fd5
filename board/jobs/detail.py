"""One job run as its page shows it: its fields, its allocation per host (each device and
the GPU it matched), and its figures summed from its hours (job_hours, accounting.md)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from board.errors import NotFound

US_PER_HOUR = 3_600_000_000


@dataclass(frozen=True, slots=True)
class JobDetail:
    pk: int
    public_id: uuid.UUID
    cluster: str
    job_id: str
    linux_user: str
    account: str
    partition: str
    name: str
    state: str
    started_at: datetime
    ended_at: datetime | None
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One device of the allocation on one host; the GPU it matched (None: no GPU of
    the host has that minor number or index yet)."""

    host_pk: int
    host_id: str
    host_name: str
    device: int
    gpu_pk: int | None
    gpu_uuid: str | None
    gpu_index: int | None
    gpu_name: str | None


@dataclass(frozen=True, slots=True)
class JobFigures:
    """The job's figures in GPU-hours (accounting.md "Scheduler jobs")."""

    covered: float
    active: float
    idle_held: float
    foreign: float
    unused: float
    avg_util_pct: float | None
    max_memory_used_mb: int | None

    @property
    def wasted(self) -> float:
        return self.idle_held + self.unused

    @property
    def efficiency(self) -> float | None:
        return self.active / self.covered if self.covered else None


_JOB = """
    SELECT id, public_id, cluster, job_id, linux_user, account, partition, name, state,
           started_at, ended_at, recorded_at
    FROM scheduler_jobs WHERE workspace_id = %s AND public_id = %s
"""

_ALLOCATION = """
    SELECT h.id, h.public_id, h.display_name, jg.device, g.id, g.uuid, g.gpu_index, g.name
    FROM job_gpus jg
    JOIN hosts h ON h.workspace_id = jg.workspace_id AND h.id = jg.host_id
    LEFT JOIN gpus g ON g.workspace_id = jg.workspace_id AND g.host_id = jg.host_id
                    AND coalesce(g.minor_number, g.gpu_index) = jg.device
    WHERE jg.workspace_id = %s AND jg.job_id = %s
    ORDER BY h.display_name, h.id, jg.device
"""

_FIGURES = """
    SELECT coalesce(sum(covered_us), 0), coalesce(sum(active_us), 0),
           coalesce(sum(idle_held_us), 0), coalesce(sum(foreign_us), 0),
           coalesce(sum(unused_us), 0), coalesce(sum(util_pct_us), 0),
           max(max_memory_used_mb)
    FROM job_hours WHERE workspace_id = %s AND job_id = %s
"""


async def job_detail(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, public_id: str
) -> JobDetail:
    """The workspace's job run of that id; 404 for any other (another workspace's too)."""
    try:
        key = uuid.UUID(public_id)
    except ValueError:
        raise NotFound("No such job in this workspace.") from None
    cur = await conn.execute(_JOB, [workspace_id, key])
    row = await cur.fetchone()
    if row is None:
        raise NotFound("No such job in this workspace.")
    return JobDetail(*row)


async def allocation(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, job_pk: int
) -> list[AllocatedDevice]:
    cur = await conn.execute(_ALLOCATION, [workspace_id, job_pk])
    return [
        AllocatedDevice(host_pk, str(host), name, device, gpu_pk, uuid_, index, gpu_name)
        for host_pk, host, name, device, gpu_pk, uuid_, index, gpu_name in await cur.fetchall()
    ]


async def job_figures(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, job_pk: int
) -> JobFigures:
    cur = await conn.execute(_FIGURES, [workspace_id, job_pk])
    row = await cur.fetchone()
    assert row is not None
    covered, active, idle_held, foreign, unused, util_us, memory = row
    return JobFigures(
        covered=covered / US_PER_HOUR,
        active=active / US_PER_HOUR,
        idle_held=idle_held / US_PER_HOUR,
        foreign=foreign / US_PER_HOUR,
        unused=unused / US_PER_HOUR,
        avg_util_pct=util_us / covered if covered else None,
        max_memory_used_mb=memory,
    )
