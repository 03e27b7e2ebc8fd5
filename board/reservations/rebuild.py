"""Rebuilding the reservation figures from raw samples, beside the rollups' rebuild.

`gua-board rollups rebuild` calls this after board.rollups.rebuild (the rollups never
import reservations). The replay feeds each booked host's stored observations, in time
order, through the same ReservationDelta the ingest path credits with, so a rebuilt
hour equals the one ingest credited. Observations up to maxSampleGap outside the window
are read too, so an interval crossing its edge is cut where ingest cut it; only hours
inside the window are kept.

The figures live in two places (board.reservations.crediting): a booking's partial
hours in reservation_hour_figures, its whole hours in the GPU-hour rows' booked sums.
Both are cleared in the window and written again. board.rollups.rebuild re-inserts the
GPU-hour rows with booked sums of 0, so it is always followed by this, in the same
transaction (board/cli/rollups.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from board.hosts.locks import lock_hosts
from board.jobs.rebuild import rebuild_job_figures
from board.reservations.store import HostSpan, load_bookings, write_figures
from board.rollups.crediting import to_us
from board.rollups.gaps import load_schedule
from board.rollups.rebuild import RebuildResult, host_ticks, rebuild

# Only rows holding booked time: an UPDATE of a GPU-hour row fires its statement
# triggers (host hours +0, the day marked dirty), so the others are left untouched.
_ZERO_BOOKED = """
    UPDATE gpu_hour_rollups SET booked_covered_us = 0, booked_used_us = 0,
        booked_idle_held_us = 0, booked_conflict_us = 0, booked_unused_us = 0
    WHERE workspace_id = %s AND hour_start >= %s AND hour_start < %s
      AND (booked_covered_us, booked_used_us, booked_idle_held_us, booked_conflict_us,
           booked_unused_us) <> (0, 0, 0, 0, 0)
"""


@dataclass
class FigureRebuild:
    hosts: int = 0  # booked hosts replayed
    rows: int = 0  # reservation-hour figure rows written (a booking's partial hours)
    booked_hours: int = 0  # GPU-hour rows given booked sums (hours wholly inside one)
    job_rows: int = 0  # job-hour figure rows (board.jobs.rebuild, replayed alongside)
    job_ride_hours: int = 0  # GPU-hour rows given a run's figures (its whole hours alone)
    outside_rows: int = 0  # outside-job hour rows

    def add(self, other: FigureRebuild) -> None:
        self.hosts = max(self.hosts, other.hosts)
        self.rows += other.rows
        self.booked_hours += other.booked_hours
        self.job_rows += other.job_rows
        self.job_ride_hours += other.job_ride_hours
        self.outside_rows += other.outside_rows


async def rebuild_figures(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, from_: datetime, to: datetime
) -> FigureRebuild:
    """Replace the figures of the UTC hours in [from_, to) with a replay of the raw samples.

    Runs in the caller's transaction, with the workspace's host rows locked in key order
    first (as ingest and booking changes lock them), so neither interleaves with it.
    """
    if from_.minute or from_.second or from_.microsecond or to.minute or to.second:
        raise ValueError("rebuild windows start and end on whole hours")
    hosts = await lock_hosts(conn, "h.id", "h.workspace_id = %s", [workspace_id])
    gaps = await load_schedule(conn, workspace_id)
    gap = timedelta(microseconds=gaps.widest_us)
    window = [workspace_id, from_, to]
    await conn.execute(
        "DELETE FROM reservation_hour_figures WHERE workspace_id = %s "
        "AND hour_start >= %s AND hour_start < %s",
        window,
    )
    await conn.execute(_ZERO_BOOKED, window)
    cur = await conn.execute(
        "SELECT DISTINCT host_id FROM reservation_gpus "
        "WHERE workspace_id = %s AND during && tstzrange(%s, %s)",
        [workspace_id, from_, to],
    )
    booked = {int(row[0]) for row in await cur.fetchall()}
    result = FigureRebuild()
    for (host_id,) in hosts:
        if host_id not in booked:
            continue
        delta = await load_bookings(conn, [HostSpan(workspace_id, host_id, from_, to)])
        ticks = await host_ticks(conn, workspace_id, host_id, from_ - gap, to + gap)
        delta.credit_series(ticks, gaps)
        delta.keep_hours(to_us(from_), to_us(to))
        await write_figures(conn, delta, {host_id: workspace_id})
        result.hosts += 1
        result.rows += sum(1 for sums in delta.figures.values() if any(sums))
        result.booked_hours += sum(1 for sums in delta.booked.values() if any(sums))
    return result


async def rebuild_hours(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, from_: datetime, to: datetime
) -> tuple[RebuildResult, FigureRebuild]:
    """The rollups, the booking figures and the job figures (board.jobs.rebuild) of the
    UTC hours in [from_, to), replayed from raw in the caller's transaction: the rollups'
    rebuild re-inserts the GPU-hour rows, whose booked sums only the figures' rebuild
    writes again, so they always go together (a re-judged maxSampleGap, the energy
    back-fill, `gua-board rollups rebuild`).
    """
    rollups = await rebuild(conn, workspace_id, from_, to)
    figures = await rebuild_figures(conn, workspace_id, from_, to)
    jobs = await rebuild_job_figures(conn, workspace_id, from_, to)
    figures.job_rows, figures.outside_rows = jobs.figure_rows, jobs.outside_rows
    figures.job_ride_hours = jobs.ride_hours
    return rollups, figures
