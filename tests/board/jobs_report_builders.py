"""Builders for the jobs report tests (no tests here): job runs, their allocations and
their credited figures written straight into the real tables, as crediting writes them
(the figures here are hand-computed, so a test knows each sum)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import psycopg

from board.db.urls import libpq_url
from tests.board.builders import Tenant, enroll, push
from tests.board.test_reports_builders import days_ago_midnight, gpu, observation, workspace_id

HOUR_US = 3_600_000_000


@dataclass(frozen=True)
class Fleet:
    """A workspace's one cluster host and its GPUs' ids by index."""

    ws: int
    host_id: int
    gpus: dict[int, int]


async def fleet(app: Any, client: httpx.AsyncClient, tenant: Tenant, gpus: int = 3) -> Fleet:
    host = await enroll(client, tenant, f"node-{tenant.slug}")
    body = observation(days_ago_midnight(1), [gpu(i) for i in range(gpus)])
    r = await push(client, host["agentToken"], body)
    assert r.status_code == 202, r.text
    async with await connect(app) as conn:
        ws = await workspace_id(conn, tenant.slug)
        cur = await conn.execute(
            "SELECT gpu_index, id, host_id FROM gpus WHERE workspace_id = %s", [ws]
        )
        rows = await cur.fetchall()
    return Fleet(ws, rows[0][2], {index: gpu_id for index, gpu_id, _ in rows})


async def connect(app: Any) -> psycopg.AsyncConnection[Any]:
    url = libpq_url(app.state.runtime.database_url)
    return await psycopg.AsyncConnection.connect(url, autocommit=True)


async def add_job(
    app: Any,
    where: Fleet,
    job_id: str,
    user: str,
    account: str,
    partition: str,
    started: datetime,
    ended: datetime | None,
    devices: list[int],
    name: str = "train",
    state: str = "COMPLETED",
) -> tuple[int, str]:
    """A run and its allocated devices on the fleet's host; (its id, its public id)."""
    public_id = str(uuid.uuid4())
    async with await connect(app) as conn:
        cur = await conn.execute(
            """
            INSERT INTO scheduler_jobs (workspace_id, public_id, cluster, raw_job_id, job_id,
                linux_user, account, partition, name, state, started_at, ended_at)
            VALUES (%s, %s, 'hpc', %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id
            """,
            [
                where.ws,
                public_id,
                job_id,
                job_id,
                user,
                account,
                partition,
                name,
                state,
                started,
                ended,
            ],
        )
        row = await cur.fetchone()
        assert row is not None
        for device in devices:
            await conn.execute(
                "INSERT INTO job_gpus (workspace_id, job_id, host_id, device, during, linux_user) "
                "SELECT %s, %s, %s, %s, tstzrange(%s, %s), "
                "(SELECT linux_user FROM scheduler_jobs WHERE id = %s)",
                [where.ws, row[0], where.host_id, device, started, ended, row[0]],
            )
    return int(row[0]), public_id


async def add_figure(
    app: Any,
    where: Fleet,
    job: int,
    device: int,
    hour: datetime,
    *,
    active: float = 0,
    idle_held: float = 0,
    foreign: float = 0,
    unused: float = 0,
    util: float = 0,
    memory: int = 0,
) -> None:
    """One job GPU hour: each part in hours (covered is their sum); `util` the average
    utilization over the active time (util_pct_us = util × active µs)."""
    parts = [round(h * HOUR_US) for h in (active, idle_held, foreign, unused)]
    async with await connect(app) as conn:
        await conn.execute(
            """
            INSERT INTO job_hour_figures (workspace_id, job_id, gpu_id, hour_start, host_id,
                covered_us, active_us, idle_held_us, foreign_us, unused_us, util_pct_us,
                max_memory_used_mb)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            """,
            [
                where.ws,
                job,
                where.gpus[device],
                hour,
                where.host_id,
                sum(parts),
                *parts,
                round(util * parts[0]),
                memory,
            ],
        )


async def add_outside(
    app: Any, where: Fleet, device: int, user: str, hour: datetime, hours: float
) -> None:
    async with await connect(app) as conn:
        await conn.execute(
            "INSERT INTO outside_job_hours (workspace_id, gpu_id, linux_user, hour_start, "
            "host_id, outside_us) VALUES (%s, %s, %s, %s, %s, %s)",
            [where.ws, where.gpus[device], user, hour, where.host_id, round(hours * HOUR_US)],
        )


async def jobs_report(
    client: httpx.AsyncClient, tenant: Tenant, role: str = "finance", **params: str
) -> dict[str, Any]:
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/jobs", params=params, headers=tenant.auth(role)
    )
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found
