"""The server's maintenance schedule: at start and then every interval.

Each run creates and drops raw partitions (board.observations), deletes expired rollup
hours, job figure hours (board.jobs) and audit events (board.audit), never younger
than the operator's floor (min_retention_days) whatever a workspace sets, and
recomputes dirty day rollups (board.rollups) and dirty job day figures (board.jobs).
It lives above them so that none has to import another.

With several board processes on one database the schedule runs in one of them only,
the leader: whichever holds a session-level PostgreSQL advisory lock on a connection
of its own. The others ask for the lock every `maintenance_leader_retry_seconds`; when
the leader stops or dies, PostgreSQL ends its session, the lock is free, and the next
process to ask leads. The leader probes its lock's connection as often, so a leader
whose connection broke stops leading instead of running beside the new one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

import psycopg
from psycopg_pool import AsyncConnectionPool

from board.audit.service import delete_expired as drop_expired_audit_events
from board.db.urls import libpq_url
from board.errors import as_unavailable
from board.jobs.days import refresh_job_days
from board.jobs.retention import drop_expired_job_hours
from board.metrics.registry import maintenance_failures, maintenance_leader, maintenance_runs
from board.observations.compaction import compact_closed_days
from board.observations.maintenance import run_maintenance
from board.reports.bodies import forget_bodies_of_days
from board.rollups.daily import refresh_day_rollups
from board.rollups.retention import drop_expired_rollups
from board.settings import Settings
from board.workspaces.energy_backfill import backfill_energy

log = logging.getLogger(__name__)

# pg_try_advisory_lock key of the leader (any bigint; distinct from the partition
# maintenance lock, which guards each run's DDL against the ingest's own healing).
LEADER_LOCK_KEY = 0x6775615F6C656164  # "gua_lead"


class PartitionCache(Protocol):
    def forget_partitions(self) -> None: ...


class MaintainedProcess(Protocol):
    """What a run needs of the board process (board.runtime.Runtime has it)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def database_url(self) -> str: ...

    @property
    def pool(self) -> AsyncConnectionPool[Any]: ...

    @property
    def writer(self) -> PartitionCache: ...


async def maintain_once(process: MaintainedProcess) -> None:
    async with process.pool.connection() as conn:
        await conn.set_autocommit(True)
        try:
            await run_maintenance(
                conn,
                retention_days=process.settings.raw_retention_days,
                ahead_days=process.settings.partitions_ahead_days,
            )
            # Closed days of raw history into one row per host and hour.
            await compact_closed_days(conn)
            # Rollups and the audit log: the workspace's retention_days, but at least the
            # operator's floor (a workspace admin must not erase the trail or the billing).
            floor = process.settings.min_retention_days
            await drop_expired_rollups(conn, min_days=floor)
            await drop_expired_job_hours(conn, min_days=floor)
            await drop_expired_audit_events(conn, min_days=floor)
            # Energy for hours credited before the board counted it (once, after upgrade).
            await backfill_energy(conn)
            await refresh_day_rollups(conn, on_days_refreshed=forget_bodies_of_days)
            # The jobs report's day rows, from job figures (marked apart from the rollups:
            # a re-credited job record changes its figures, not the GPU-hour rollups).
            await refresh_job_days(conn)
        finally:
            await conn.set_autocommit(False)
    # The ingest writer remembers which days have partitions; some may be gone now.
    process.writer.forget_partitions()


async def maintenance_loop(process: MaintainedProcess) -> None:
    """Lead when the lock is free, else wait and ask again; forever (cancelled at stop)."""
    retry = process.settings.maintenance_leader_retry_seconds
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(
                libpq_url(process.database_url), autocommit=True
            ) as conn:
                while not await _take_lead(conn):
                    await asyncio.sleep(retry)
                await _lead(process, conn)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("maintenance: leader connection lost (%s); asking again", exc)
        finally:
            maintenance_leader.set(0)
        await asyncio.sleep(retry)


async def _take_lead(conn: psycopg.AsyncConnection[Any]) -> bool:
    cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", [LEADER_LOCK_KEY])
    row = await cur.fetchone()
    return bool(row and row[0])


async def _lead(process: MaintainedProcess, conn: psycopg.AsyncConnection[Any]) -> None:
    """Run the schedule while `conn` (which holds the lock) stays up; raises when it drops."""
    settings = process.settings
    maintenance_leader.set(1)
    log.info("maintenance: this process leads the schedule")
    while True:
        try:
            await maintain_once(process)
            maintenance_runs.inc()
        except Exception as exc:
            maintenance_failures.inc()
            if as_unavailable(exc) is None:
                log.exception("maintenance failed; will retry")
            else:
                log.warning("maintenance failed, the database is unavailable (%s)", exc)
        next_run = time.monotonic() + settings.maintenance_interval_seconds
        while (left := next_run - time.monotonic()) > 0:
            await asyncio.sleep(min(left, settings.maintenance_leader_retry_seconds))
            async with asyncio.timeout(10):  # not wait_for: see archives.worker
                await conn.execute("SELECT 1")
