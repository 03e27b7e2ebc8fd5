"""Hosts by freshness, counted when Prometheus scrapes: one bounded query.

Each host is judged by the hosts' one freshness rule (board/hosts/freshness.py) at the
database's clock: never pushed, stale (silent longer than the workspace's
stale_after_seconds), else the newest observation's collection status. Revoked hosts
are left out. Counts cover the whole board, never one workspace, so no label names a
tenant. The composition root hands this to /metrics (board.metrics.routes).
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from psycopg_pool import AsyncConnectionPool

from board.hosts.freshness import freshness

STATES = ("ok", "partial", "error", "stale", "never")
# A scrape every few seconds from several Prometheus servers costs one query at most
# this often per process; and a slow database fails the gauge, never the scrape.
CACHE_SECONDS = 5.0
QUERY_TIMEOUT = "2s"

# Hosts sharing a newest observation time, status and threshold are judged once.
_HOSTS_BY_FRESHNESS_INPUTS = """
SELECT h.latest_observed_at, h.latest_collection_status, w.stale_after_seconds, now(),
       count(*)
FROM hosts h
JOIN workspaces w ON w.id = h.workspace_id
WHERE h.revoked_at IS NULL
GROUP BY 1, 2, 3
"""


class HostFreshness:
    """The gauge's values of one process, cached for CACHE_SECONDS."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._at = float("-inf")

    async def counts(self, pool: AsyncConnectionPool[Any]) -> dict[str, int]:
        if time.monotonic() - self._at < CACHE_SECONDS:
            return self._counts
        counts = dict.fromkeys(STATES, 0)
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(f"SET LOCAL statement_timeout = '{QUERY_TIMEOUT}'")
            cur = await conn.execute(_HOSTS_BY_FRESHNESS_INPUTS)
            for observed_at, status, stale_after, now, count in await cur.fetchall():
                counts[freshness(observed_at, status, now, int(stale_after))] += int(count)
        self._counts, self._at = counts, time.monotonic()
        return counts

    async def family(self, pool: AsyncConnectionPool[Any]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "gua_board_hosts", "Enrolled, unrevoked hosts by freshness.", labels=["freshness"]
        )
        for state, count in (await self.counts(pool)).items():
            family.add_metric([state], count)
        return family
