"""The server's maintenance schedule: at start and then every interval.

Each run creates and drops raw partitions (board.partitions), deletes expired rollup
hours and audit events (board.audit) and recomputes dirty day rollups (board.rollups).
It lives above them so that none has to import another.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from psycopg_pool import AsyncConnectionPool

from board.audit.service import delete_expired as drop_expired_audit_events
from board.partitions.maintenance import run_maintenance
from board.rollups.daily import refresh_day_rollups
from board.rollups.retention import drop_expired_rollups
from board.settings import Settings

log = logging.getLogger(__name__)


class PartitionCache(Protocol):
    def forget_partitions(self) -> None: ...


class MaintainedProcess(Protocol):
    """What a run needs of the board process (board.runtime.Runtime has it)."""

    @property
    def settings(self) -> Settings: ...

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
            await drop_expired_rollups(conn)
            # The audit log is kept as long as the workspace's rollups (retention_days).
            await drop_expired_audit_events(conn)
            await refresh_day_rollups(conn)
        finally:
            await conn.set_autocommit(False)
    # The ingest writer remembers which days have partitions; some may be gone now.
    process.writer.forget_partitions()


async def maintenance_loop(process: MaintainedProcess) -> None:
    while True:
        try:
            await maintain_once(process)
        except Exception:
            log.exception("partition maintenance failed; will retry")
        await asyncio.sleep(process.settings.maintenance_interval_seconds)
