"""Reading the job allocations of hosts, and writing job figure deltas.

Both run on a psycopg connection inside the caller's transaction, whose host rows are
locked already (ingest batches and job record changes of one host never interleave).
A job's device (Slurm's GRES IDX) is matched to its host's GPU here, when read: the
GPU's minor number when the agent reported one, else its index.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

import psycopg

from board.db.pgtext import bigint_array, int_array, text_array
from board.jobs.crediting import JobDelta, JobGpuRange, OutsideView
from board.rollups.crediting import HOUR_US, RollupDelta, to_us
from board.rollups.store import upsert_rollup_delta

# A range's ends as µs since the epoch (exact: extract() is numeric), so the rows read per
# batch need no timestamp parsed and converted in Python; NULL: still running.
US_OF_START = "(extract(epoch FROM lower(jg.during)) * 1000000)::bigint"
US_OF_END = "(extract(epoch FROM upper(jg.during)) * 1000000)::bigint"

# Each span's job GPUs found from its host (OFFSET 0 keeps the per-span index probe of
# ix_job_gpus_host_end, as for bookings, board.reservations.store); a running job's
# range is unbounded above (upper NULL). The user is job_gpus' copy: a lookup in
# scheduler_jobs per row was planned on the (workspace, user) index before the table was
# analyzed, 14 ms a batch with 800 runs (docs/benchmarks.md). Every job of the host is
# read, not only those of its GPUs' holders: the outside-job rule needs them all. (An
# ingest batch reads them through board.jobs.batch, which keeps them between batches.)
_JOB_GPUS = f"""
    SELECT jg.workspace_id, jg.job_id, jg.host_id, g.id, {US_OF_START}, {US_OF_END},
           jg.linux_user, j.raw_job_id
    FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[], %s::timestamptz[])
         AS s(ws, host_id, lo, hi)
    CROSS JOIN LATERAL (
        SELECT * FROM job_gpus jg
        WHERE jg.workspace_id = s.ws AND jg.host_id = s.host_id
          AND (upper(jg.during) > s.lo OR upper_inf(jg.during))
          AND lower(jg.during) <= s.hi
        OFFSET 0
    ) AS jg
    JOIN gpus g ON g.workspace_id = jg.workspace_id AND g.host_id = jg.host_id
               AND coalesce(g.minor_number, g.gpu_index) = jg.device
    JOIN scheduler_jobs j ON j.workspace_id = jg.workspace_id AND j.id = jg.job_id
"""
_CLUSTER_HOSTS = """
    SELECT ch.host_id, ch.since FROM cluster_hosts ch
    WHERE (ch.workspace_id, ch.host_id) IN (SELECT * FROM unnest(%s::bigint[], %s::bigint[]))
"""

Span = tuple[int, int, datetime, datetime]  # (workspace id, host id, lo, hi)


def _span_arrays(spans: Sequence[Span]) -> list[str]:
    return [
        int_array(s[0] for s in spans),
        int_array(s[1] for s in spans),
        text_array(s[2].isoformat() for s in spans),
        text_array(s[3].isoformat() for s in spans),
    ]


def job_gpu_ranges(rows: Iterable[tuple[Any, ...]]) -> list[JobGpuRange]:
    """Rows of (workspace, job, host, gpu, start µs, end µs or None, user, raw job id) as
    ranges, once
    each. Every ingest batch reads the same few hundred rows again: each is made once."""
    found: dict[tuple[int, int], JobGpuRange] = {}
    for row in rows:
        found[(row[1], row[3])] = job_gpu_range(*row)
    return [found[key] for key in sorted(found)]


@lru_cache(maxsize=16_384)
def job_gpu_range(
    ws: int,
    job_id: int,
    host_id: int,
    gpu_id: int,
    start: int,
    end: int | None,
    user: str,
    raw_job_id: str,
) -> JobGpuRange:
    return JobGpuRange.of(ws, job_id, host_id, gpu_id, start, end, user, raw_job_id)


def delta_of(ranges: Iterable[JobGpuRange], since: dict[int, datetime]) -> JobDelta:
    """A delta crediting the ranges and judging outside time against them all."""
    delta = JobDelta()
    view = OutsideView({host: to_us(at) for host, at in since.items()})
    for job_gpu in ranges:
        delta.add_job_gpu(job_gpu)
        view.add(job_gpu)
    delta.add_view(view)
    return delta


async def load_job_gpus(
    conn: psycopg.AsyncConnection[Any], spans: Sequence[Span]
) -> tuple[list[JobGpuRange], dict[int, datetime]]:
    """The job GPUs touching the spans, and the spans' hosts that are cluster hosts."""
    if not spans:
        return [], {}
    cur = await conn.execute(_JOB_GPUS, _span_arrays(spans))
    ranges = job_gpu_ranges(await cur.fetchall())
    return ranges, await load_cluster_since(
        conn, workspace_id=spans[0][0], host_ids=[s[1] for s in spans]
    )


async def load_cluster_since(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, host_ids: Iterable[int]
) -> dict[int, datetime]:
    """Which of the hosts are cluster hosts, and since when."""
    hosts = sorted(set(host_ids))
    cur = await conn.execute(
        _CLUSTER_HOSTS, [int_array([workspace_id] * len(hosts)), int_array(hosts)]
    )
    return {int(host): since for host, since in await cur.fetchall()}


_RUN_GPUS = f"""
    SELECT jg.workspace_id, jg.job_id, jg.host_id, g.id, {US_OF_START}, {US_OF_END},
           j.linux_user, j.raw_job_id
    FROM unnest(%s::text[], %s::text[], %s::int[]) AS k(cluster, raw_job_id, restart_count)
    JOIN scheduler_jobs j ON j.workspace_id = %s AND j.cluster = k.cluster
                         AND j.raw_job_id = k.raw_job_id AND j.restart_count = k.restart_count
    JOIN job_gpus jg ON jg.workspace_id = j.workspace_id AND jg.job_id = j.id
                    AND NOT isempty(jg.during)
    JOIN gpus g ON g.workspace_id = jg.workspace_id AND g.host_id = jg.host_id
               AND coalesce(g.minor_number, g.gpu_index) = jg.device
"""
_RUN_HOSTS = """
    SELECT DISTINCT jg.host_id
    FROM unnest(%s::text[], %s::text[], %s::int[]) AS k(cluster, raw_job_id, restart_count)
    JOIN scheduler_jobs j ON j.workspace_id = %s AND j.cluster = k.cluster
                         AND j.raw_job_id = k.raw_job_id AND j.restart_count = k.restart_count
    JOIN job_gpus jg ON jg.workspace_id = j.workspace_id AND jg.job_id = j.id
"""
RunKey = tuple[str, str, int]  # (cluster, raw job id, restart count)


def _run_params(workspace_id: int, runs: Sequence[RunKey]) -> list[Any]:
    return [
        text_array(r[0] for r in runs),
        text_array(r[1] for r in runs),
        int_array(r[2] for r in runs),
        workspace_id,
    ]


async def load_run_gpus(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, runs: Sequence[RunKey]
) -> list[JobGpuRange]:
    """The GPUs of these runs as stored now (matched to the hosts' GPUs)."""
    if not runs:
        return []
    cur = await conn.execute(_RUN_GPUS, _run_params(workspace_id, runs))
    return job_gpu_ranges(await cur.fetchall())


async def load_run_hosts(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, runs: Sequence[RunKey]
) -> set[int]:
    """The hosts these runs hold devices on now."""
    if not runs:
        return set()
    cur = await conn.execute(_RUN_HOSTS, _run_params(workspace_id, runs))
    return {int(row[0]) for row in await cur.fetchall()}


_UPSERT_FIGURES = """
    INSERT INTO job_hour_figures AS f (workspace_id, job_id, gpu_id, hour_start, host_id,
        covered_us, active_us, idle_held_us, foreign_us, unused_us, util_pct_us,
        max_memory_used_mb)
    SELECT ws, job_id, gpu_id, to_timestamp(hour * 3600), host_id, covered_us, active_us,
           idle_held_us, foreign_us, unused_us, util_pct_us, max_memory_used_mb
    FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],
                %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],
                %s::bigint[], %s::int[])
         AS d(ws, job_id, gpu_id, hour, host_id, covered_us, active_us, idle_held_us,
              foreign_us, unused_us, util_pct_us, max_memory_used_mb)
    ON CONFLICT (workspace_id, job_id, gpu_id, hour_start) DO UPDATE SET
        covered_us = f.covered_us + EXCLUDED.covered_us,
        active_us = f.active_us + EXCLUDED.active_us,
        idle_held_us = f.idle_held_us + EXCLUDED.idle_held_us,
        foreign_us = f.foreign_us + EXCLUDED.foreign_us,
        unused_us = f.unused_us + EXCLUDED.unused_us,
        util_pct_us = f.util_pct_us + EXCLUDED.util_pct_us,
        max_memory_used_mb = GREATEST(f.max_memory_used_mb, EXCLUDED.max_memory_used_mb)
"""
_UPSERT_OUTSIDE = """
    INSERT INTO outside_job_hours AS o (workspace_id, gpu_id, linux_user, hour_start,
        host_id, outside_us)
    SELECT ws, gpu_id, linux_user, to_timestamp(hour * 3600), host_id, outside_us
    FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::bigint[], %s::bigint[],
                %s::bigint[]) AS d(ws, gpu_id, linux_user, hour, host_id, outside_us)
    ON CONFLICT (workspace_id, gpu_id, linux_user, hour_start) DO UPDATE SET
        outside_us = o.outside_us + EXCLUDED.outside_us
"""


async def upsert_job_delta(
    conn: psycopg.AsyncConnection[Any],
    delta: JobDelta,
    workspace_of_host: dict[int, int],
    *,
    with_rides: bool = True,
) -> None:
    """Add the delta's figures, outside hours and (unless the caller sends them with its
    own GPU-hour upsert, as ingest does: `with_rides=False`) the job sums of GPU-hour
    rows, each statement in key order (concurrent upserts never deadlock). Pipelined
    when the caller's connection is."""
    if with_rides:
        rides = delta.ride_rows()
        if rides:
            await upsert_rollup_delta(conn, workspace_of_host, RollupDelta(), rides=rides)
    figures = [
        (delta.workspace_of_job[job], job, gpu, hour // HOUR_US, delta.host_of_gpu[gpu], *sums)
        for (job, gpu, hour), sums in sorted(delta.figures.items())
        if any(sums)
    ]
    if figures:
        *bigints, memory = zip(*figures, strict=True)
        await conn.execute(
            _UPSERT_FIGURES, [*(bigint_array(c) for c in bigints), int_array(memory)]
        )
    outside = sorted(
        (workspace_of_host[delta.host_of_gpu[gpu]], gpu, user, hour, sums[0])
        for (gpu, user, hour), sums in delta.outside.items()
        if sums[0]
    )
    if outside:
        await conn.execute(
            _UPSERT_OUTSIDE,
            [
                bigint_array(o[0] for o in outside),
                bigint_array(o[1] for o in outside),
                text_array(o[2] for o in outside),
                bigint_array(o[3] // HOUR_US for o in outside),
                bigint_array(delta.host_of_gpu[o[1]] for o in outside),
                bigint_array(o[4] for o in outside),
            ],
        )
