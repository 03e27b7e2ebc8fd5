"""Storing job records as they are: runs upserted, each named host's allocation replaced,
the hosts they name marked as cluster hosts. No figures are credited here (the service
does that around this, board.jobs.service).

The rule (docs/jobs.md, "Job records"): a record replaces what was known of its run
(cluster, raw id, restart count): its fields, and the allocation on each host it names;
a host it does not name keeps its allocation, whose time range (and user) follow the run's. What a
node cannot know does not erase what the controller said: an empty name, account or
partition, or a display id that is only the raw id (a prolog has no array ids), keeps
the stored one. Times: the controller's are Slurm's own, so they win. A node's record
never moves a known start or end (its prolog's start is its own clock's "now", a second
or so off; a node's "running" after an end is a prolog replayed from its spool), it only
fills an end that is missing. The bridge replaces both, and may reopen a run, except with
its guess for a job that vanished from squeue (`UNKNOWN_END`), which never replaces an
end that is known.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.jobs.records import JobRecord

_UPSERT_RUNS = """
    INSERT INTO scheduler_jobs AS j (workspace_id, public_id, cluster, raw_job_id,
        restart_count, job_id, linux_user, account, partition, name, state, started_at,
        ended_at)
    SELECT %(ws)s, r.* FROM unnest(%(uuids)s::uuid[], %(clusters)s::text[], %(raws)s::text[],
        %(restarts)s::int[], %(ids)s::text[], %(users)s::text[], %(accounts)s::text[],
        %(partitions)s::text[], %(names)s::text[], %(states)s::text[],
        %(starts)s::timestamptz[], %(ends)s::timestamptz[]) AS r
    ON CONFLICT (workspace_id, cluster, raw_job_id, restart_count) DO UPDATE
        SET job_id = CASE WHEN EXCLUDED.job_id = EXCLUDED.raw_job_id THEN j.job_id
                          ELSE EXCLUDED.job_id END,
            linux_user = EXCLUDED.linux_user,
            account = coalesce(nullif(EXCLUDED.account, ''), j.account),
            partition = coalesce(nullif(EXCLUDED.partition, ''), j.partition),
            name = coalesce(nullif(EXCLUDED.name, ''), j.name),
            state = CASE WHEN j.ended_at IS NOT NULL
                              AND (%(node)s OR EXCLUDED.state = 'UNKNOWN_END')
                         THEN j.state ELSE EXCLUDED.state END,
            started_at = CASE WHEN %(node)s THEN j.started_at ELSE EXCLUDED.started_at END,
            ended_at = CASE WHEN %(node)s THEN coalesce(j.ended_at, EXCLUDED.ended_at)
                            WHEN EXCLUDED.state = 'UNKNOWN_END'
                            THEN coalesce(j.ended_at, EXCLUDED.ended_at)
                            ELSE EXCLUDED.ended_at END,
            recorded_at = now()
    RETURNING j.id, j.cluster, j.raw_job_id, j.restart_count
"""

# Every allocation of these runs follows its run's [started_at, ended_at), named or not.
_FOLLOW_RUNS = """
    UPDATE job_gpus jg SET during = tstzrange(j.started_at, j.ended_at, '[)'),
                           linux_user = j.linux_user
    FROM scheduler_jobs j
    WHERE j.workspace_id = %s AND j.id = ANY(%s::bigint[])
      AND jg.workspace_id = j.workspace_id AND jg.job_id = j.id
      AND (jg.during IS DISTINCT FROM tstzrange(j.started_at, j.ended_at, '[)')
           OR jg.linux_user IS DISTINCT FROM j.linux_user)
"""

_DROP_NAMED = """
    DELETE FROM job_gpus
    WHERE workspace_id = %s
      AND (job_id, host_id) IN (SELECT * FROM unnest(%s::bigint[], %s::bigint[]))
"""

_INSERT_DEVICES = """
    INSERT INTO job_gpus (workspace_id, job_id, host_id, device, during, linux_user)
    SELECT %s, d.job_id, d.host_id, d.device, tstzrange(j.started_at, j.ended_at, '[)'),
           j.linux_user
    FROM unnest(%s::bigint[], %s::bigint[], %s::int[]) AS d(job_id, host_id, device)
    JOIN scheduler_jobs j ON j.workspace_id = %s AND j.id = d.job_id
"""

# A host joins its cluster from the earliest start any record of it names.
_CLUSTER_HOSTS = """
    INSERT INTO cluster_hosts AS c (workspace_id, host_id, cluster, since)
    SELECT %s, h.* FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[]) AS h
    ON CONFLICT (workspace_id, host_id) DO UPDATE
        SET cluster = EXCLUDED.cluster, since = least(c.since, EXCLUDED.since)
"""


async def store_records(
    session: AsyncSession,
    workspace_id: int,
    records: Sequence[JobRecord],
    *,
    from_node: bool = False,
) -> None:
    """Store the records (at most one per run) in the request's transaction.

    Every host of every allocation must be a host of the workspace (the caller resolved
    them: a node's own host, or a bridge's hostnames matched in this workspace).
    """
    if not records:
        return
    conn = await report_connection(session)
    # Key order, so two requests with overlapping runs lock their rows in the same order.
    ordered = sorted(records, key=lambda r: (r.cluster, r.raw_job_id, r.restart_count))
    ids = await _upsert_runs(conn, workspace_id, ordered, from_node)
    await conn.execute(_FOLLOW_RUNS, [workspace_id, list(ids.values())])
    await _replace_named(conn, workspace_id, ordered, ids)
    await _mark_cluster_hosts(conn, workspace_id, ordered)


async def _upsert_runs(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    records: Sequence[JobRecord],
    from_node: bool,
) -> dict[tuple[str, str, int], int]:
    columns: list[list[Any]] = [[] for _ in range(12)]
    for r in records:
        row = (
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
        )
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    names: tuple[str, ...] = ("uuids", "clusters", "raws", "restarts", "ids", "users")
    names += ("accounts", "partitions", "names", "states", "starts", "ends")
    values = {"ws": workspace_id, "node": from_node, **dict(zip(names, columns, strict=True))}
    cur = await conn.execute(_UPSERT_RUNS, values)
    return {(c, raw, n): int(i) for i, c, raw, n in await cur.fetchall()}


async def _replace_named(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    records: Sequence[JobRecord],
    ids: dict[tuple[str, str, int], int],
) -> None:
    named_jobs: list[int] = []
    named_hosts: list[int] = []
    jobs: list[int] = []
    hosts: list[int] = []
    devices: list[int] = []
    for r in records:
        job = ids[(r.cluster, r.raw_job_id, r.restart_count)]
        for allocation in r.allocations:
            named_jobs.append(job)
            named_hosts.append(allocation.host_id)
            for device in sorted(set(allocation.devices)):
                jobs.append(job)
                hosts.append(allocation.host_id)
                devices.append(device)
    if not named_jobs:
        return
    await conn.execute(_DROP_NAMED, [workspace_id, named_jobs, named_hosts])
    if devices:
        await conn.execute(_INSERT_DEVICES, [workspace_id, jobs, hosts, devices, workspace_id])


async def _mark_cluster_hosts(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, records: Sequence[JobRecord]
) -> None:
    since: dict[int, tuple[datetime, str]] = {}
    for r in records:
        for allocation in r.allocations:
            known = since.get(allocation.host_id)
            if known is None or r.started_at < known[0]:
                since[allocation.host_id] = (r.started_at, r.cluster)
    if not since:
        return
    hosts = sorted(since)
    await conn.execute(
        _CLUSTER_HOSTS,
        [workspace_id, hosts, [since[h][1] for h in hosts], [since[h][0] for h in hosts]],
    )
