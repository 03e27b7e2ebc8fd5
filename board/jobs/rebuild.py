"""Rebuilding the job figures and the time outside jobs from raw samples.

Called by board.reservations.rebuild.rebuild_hours after the rollups and the booking
figures (`gua-board rollups rebuild`, a re-judged maxSampleGap, the energy back-fill),
in the caller's transaction. Each host with a job GPU in the window, or that is a
cluster host, has its stored observations (maxSampleGap beyond the window too, so an
interval crossing its edge is cut where ingest cut it) replayed through the JobDelta the
ingest path credits with; only hours inside the window are kept. Memory maxima come out
as the samples now opening credited pieces say (board.jobs.crediting). The rewritten
hours mark their UTC days dirty (the trigger, board.jobs.days): the jobs report reads
them from hours until the maintenance schedule recomputes their day rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from board.hosts.locks import lock_hosts
from board.jobs.store import delta_of, load_job_gpus, upsert_job_delta
from board.rollups.crediting import to_us
from board.rollups.gaps import load_schedule
from board.rollups.rebuild import host_ticks

# The job sums of GPU-hour rows (a run's whole hours no other run shares): only rows that
# hold one, so the rest of the GPU-hour rows are not rewritten.
_CLEAR_RIDES = """
    UPDATE gpu_hour_rollups SET job_id = NULL, job_covered_us = 0, job_active_us = 0,
        job_idle_held_us = 0, job_foreign_us = 0, job_unused_us = 0, job_util_pct_us = 0,
        job_max_memory_used_mb = 0
    WHERE workspace_id = %s AND hour_start >= %s AND hour_start < %s AND job_id IS NOT NULL
"""


@dataclass
class JobRebuild:
    hosts: int = 0  # hosts replayed
    figure_rows: int = 0  # job-hour figure rows written
    ride_hours: int = 0  # GPU-hour rows given a run's figures (whole hours it held alone)
    outside_rows: int = 0  # outside-job hour rows written


async def rebuild_job_figures(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, from_: datetime, to: datetime
) -> JobRebuild:
    """Replace the job figures and outside hours of the UTC hours in [from_, to)."""
    hosts = await lock_hosts(conn, "h.id", "h.workspace_id = %s", [workspace_id])
    gaps = await load_schedule(conn, workspace_id)
    gap = timedelta(microseconds=gaps.widest_us)
    window = [workspace_id, from_, to]
    for table in ("job_hour_figures", "outside_job_hours"):
        await conn.execute(
            f"DELETE FROM {table} WHERE workspace_id = %s AND hour_start >= %s AND hour_start < %s",
            window,
        )
    await conn.execute(_CLEAR_RIDES, window)
    cur = await conn.execute(
        "SELECT host_id FROM job_gpus WHERE workspace_id = %s AND during && tstzrange(%s, %s) "
        "UNION SELECT host_id FROM cluster_hosts WHERE workspace_id = %s AND since < %s",
        [workspace_id, from_ - gap, to + gap, workspace_id, to + gap],
    )
    involved = {int(row[0]) for row in await cur.fetchall()}
    result = JobRebuild()
    for (host_id,) in hosts:
        if host_id not in involved:
            continue
        lo, hi = from_ - gap, to + gap
        ranges, since = await load_job_gpus(conn, [(workspace_id, host_id, lo, hi)])
        delta = delta_of(ranges, since)
        delta.credit_series(await host_ticks(conn, workspace_id, host_id, lo, hi), gaps)
        delta.keep_hours(to_us(from_), to_us(to))
        await upsert_job_delta(conn, delta, {host_id: workspace_id})
        result.hosts += 1
        result.figure_rows += sum(1 for sums in delta.figures.values() if any(sums))
        result.ride_hours += sum(1 for sums in delta.rides.values() if any(sums))
        result.outside_rows += sum(1 for sums in delta.outside.values() if sums[0])
    return result
