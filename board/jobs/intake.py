"""Checked wire records -> `JobRecord`s: a node's for its own host, a bridge's with its
hostnames matched to the workspace's hosts (docs/jobs.md, "Job records")."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.jobs.records import HostAllocation, JobRecord
from board.jobs.schemas import (
    MAX_UNMATCHED_SHOWN,
    AgentJobIn,
    BridgeJobIn,
    JobFields,
    short_name,
)

# A host answers to the short form (before the first dot, any case) of its hostname (as
# its agent reported it) and of its display name; revoked hosts answer to nothing. Both
# sides are lowered by PostgreSQL, so they compare under one rule.
_MATCH = """
    WITH names AS (
        SELECT id, lower(split_part(hostname, '.', 1)) AS short FROM hosts
        WHERE workspace_id = %(ws)s AND revoked_at IS NULL AND hostname IS NOT NULL
        UNION
        SELECT id, lower(split_part(display_name, '.', 1)) FROM hosts
        WHERE workspace_id = %(ws)s AND revoked_at IS NULL
    )
    SELECT k.sent, array_agg(DISTINCT n.id)
    FROM unnest(%(sent)s::text[]) AS k(sent)
    JOIN names n ON n.short = lower(k.sent)
    GROUP BY k.sent
"""


def _record(job: JobFields, allocations: tuple[HostAllocation, ...]) -> JobRecord:
    return JobRecord(
        cluster=job.cluster,
        raw_job_id=job.raw_job_id,
        restart_count=job.restartCount,
        job_id=job.jobId,
        linux_user=job.user,
        account=job.account,
        partition=job.partition,
        name=job.name,
        state=job.state,
        started_at=job.startedAt,
        ended_at=job.endedAt,
        allocations=allocations,
    )


def node_records(jobs: Iterable[AgentJobIn], host_id: int) -> list[JobRecord]:
    """A node speaks for its own host only: each record names it, with its devices."""
    return [_record(job, (HostAllocation(host_id, tuple(job.gpus)),)) for job in jobs]


async def bridge_records(
    session: AsyncSession, workspace_id: int, jobs: Sequence[BridgeJobIn]
) -> tuple[list[JobRecord], list[str]]:
    """The records with each hostname matched to one host of this workspace, and the
    hostnames (as sent, at most MAX_UNMATCHED_SHOWN) that matched none or several: their
    allocations are left out, the rest of their records kept."""
    sent = sorted({short_name(a.hostname) for job in jobs for a in job.allocations})
    matched = await _match(await report_connection(session), workspace_id, sent)
    records: list[JobRecord] = []
    unmatched: dict[str, None] = {}
    for job in jobs:
        devices: dict[int, set[int]] = {}
        for allocation in job.allocations:
            host_id = matched.get(allocation.short_name)
            if host_id is None:
                unmatched[allocation.hostname] = None
                continue
            # Two names of one host (its hostname and its display name) add up.
            devices.setdefault(host_id, set()).update(allocation.gpus)
        allocations = tuple(
            HostAllocation(host_id, tuple(sorted(found)))
            for host_id, found in sorted(devices.items())
        )
        records.append(_record(job, allocations))
    return records, list(unmatched)[:MAX_UNMATCHED_SHOWN]


async def _match(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, short_names: list[str]
) -> dict[str, int]:
    """Short name -> the one host it names; a name of no host, or of two, is left out."""
    if not short_names:
        return {}
    cur = await conn.execute(_MATCH, {"ws": workspace_id, "sent": short_names})
    return {str(sent): int(ids[0]) for sent, ids in await cur.fetchall() if len(ids) == 1}
