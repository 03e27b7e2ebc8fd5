"""Storing job records: each run's row and its allocated devices, no crediting.

A record replaces what was known of its run (cluster, raw id, restart count): its fields,
and its devices on each host it names (a host it does not name keeps its devices). Every
device's range follows the run's [startedAt, endedAt). A host a record names becomes a
cluster host from the run's start on (the earliest start of any run named there).
The figures follow in board.jobs.service (`record_jobs`), which credits the difference.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.jobs.records import JobRecord

_UPSERT_RUN = """
    INSERT INTO scheduler_jobs AS j (workspace_id, public_id, cluster, raw_job_id,
        restart_count, job_id, linux_user, account, partition, name, state, started_at,
        ended_at)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (workspace_id, cluster, raw_job_id, restart_count) DO UPDATE SET
        job_id = EXCLUDED.job_id, linux_user = EXCLUDED.linux_user,
        account = EXCLUDED.account, partition = EXCLUDED.partition, name = EXCLUDED.name,
        state = EXCLUDED.state, started_at = EXCLUDED.started_at,
        ended_at = EXCLUDED.ended_at, recorded_at = now()
    RETURNING j.id
"""


async def store_records(
    session: AsyncSession, workspace_id: int, records: Sequence[JobRecord]
) -> None:
    """Upsert the runs and their devices in the session's transaction."""
    conn = await report_connection(session)
    for r in records:
        cur = await conn.execute(
            _UPSERT_RUN,
            [
                workspace_id,
                uuid.uuid4(),
                r.cluster,
                r.raw_job_id,
                r.restart_count,
                r.job_id,
                r.linux_user,
                r.account,
                r.partition,
                r.name,
                r.state,
                r.started_at,
                r.ended_at,
            ],
        )
        row = await cur.fetchone()
        assert row is not None
        run_id = int(row[0])
        for allocation in sorted(r.allocations, key=lambda a: a.host_id):
            await conn.execute(
                "DELETE FROM job_gpus WHERE workspace_id = %s AND job_id = %s AND host_id = %s",
                [workspace_id, run_id, allocation.host_id],
            )
            for device in sorted(set(allocation.devices)):
                await conn.execute(
                    "INSERT INTO job_gpus (workspace_id, job_id, host_id, device, during) "
                    "VALUES (%s, %s, %s, %s, tstzrange(%s, %s))",
                    [workspace_id, run_id, allocation.host_id, device, r.started_at, r.ended_at],
                )
            await conn.execute(
                "INSERT INTO cluster_hosts AS c (workspace_id, host_id, cluster, since) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (workspace_id, host_id) DO UPDATE "
                "SET since = LEAST(c.since, EXCLUDED.since)",
                [workspace_id, allocation.host_id, r.cluster, r.started_at],
            )
        await conn.execute(
            "UPDATE job_gpus SET during = tstzrange(%s, %s) "
            "WHERE workspace_id = %s AND job_id = %s",
            [r.started_at, r.ended_at, workspace_id, run_id],
        )
