"""Scheduler jobs written as the records API would leave them (real rows), for the tests
of what the board shows and tells about the jobs in force."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from tests.board.db import execute, scalar


async def host_pk(app: Any, host_public_id: str) -> int:
    found = await scalar(app, "SELECT id FROM hosts WHERE public_id = %s", host_public_id)
    assert isinstance(found, int)
    return found


async def add_job(
    app: Any,
    host_public_id: str,
    devices: list[int],
    *,
    user: str = "alice",
    started: datetime,
    ended: datetime | None = None,
    job_id: str = "4711",
    account: str = "physics",
    name: str = "train",
    cluster: str = "hpc",
) -> str:
    """One running (or ended) job allocated `devices` on the host; its public id."""
    host = await host_pk(app, host_public_id)
    public = uuid.uuid4()
    job = await scalar(
        app,
        "INSERT INTO scheduler_jobs (workspace_id, public_id, cluster, raw_job_id, job_id, "
        "linux_user, account, partition, name, state, started_at, ended_at) "
        "SELECT workspace_id, %s, %s, %s, %s, %s, %s, 'gpu', %s, %s, %s, %s "
        "FROM hosts WHERE id = %s RETURNING id",
        public,
        cluster,
        job_id,
        job_id,
        user,
        account,
        name,
        "COMPLETED" if ended else "RUNNING",
        started,
        ended,
        host,
    )
    for device in devices:
        await execute(
            app,
            "INSERT INTO job_gpus (workspace_id, job_id, host_id, device, during, linux_user) "
            "SELECT workspace_id, %s, id, %s, tstzrange(%s, %s), "
            "(SELECT linux_user FROM scheduler_jobs WHERE id = %s) FROM hosts WHERE id = %s",
            job,
            device,
            started,
            ended,
            job,
            host,
        )
    return str(public)


async def set_minor(app: Any, host_public_id: str, index: int, minor: int) -> None:
    """The GPU's NVML minor number, as our agent reports it."""
    await execute(
        app,
        "UPDATE gpus SET minor_number = %s WHERE host_id = %s AND gpu_index = %s",
        minor,
        await host_pk(app, host_public_id),
        index,
    )
