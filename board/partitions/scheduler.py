"""The server's maintenance schedule: partitions now and then every interval."""

from __future__ import annotations

import asyncio
import logging

from board.partitions.maintenance import run_maintenance
from board.rollups.daily import refresh_day_rollups
from board.rollups.retention import drop_expired_rollups
from board.runtime import Runtime

log = logging.getLogger(__name__)


async def maintain_once(runtime: Runtime) -> None:
    async with runtime.pool.connection() as conn:
        await conn.set_autocommit(True)
        try:
            await run_maintenance(
                conn,
                retention_days=runtime.settings.raw_retention_days,
                ahead_days=runtime.settings.partitions_ahead_days,
            )
            await drop_expired_rollups(conn)
            await refresh_day_rollups(conn)
        finally:
            await conn.set_autocommit(False)
    runtime.writer.forget_partitions()


async def maintenance_loop(runtime: Runtime) -> None:
    while True:
        try:
            await maintain_once(runtime)
        except Exception:
            log.exception("partition maintenance failed; will retry")
        await asyncio.sleep(runtime.settings.maintenance_interval_seconds)
