"""GPUs by health, counted when Prometheus scrapes: `gua_board_gpus{health=…}`.

- `ok`: listed in its fresh host's newest observation, below its workspace's
  hotTemperatureC (or no temperature read);
- `hot`: listed there at or above it (now: an alert rule adds its own `for: 5m`);
- `missing`: absent from its fresh host's newest observation for at least 2 minutes, not
  retired (board.health.missing);
- `not_observed`: listed in the newest observation of a host that is stale or in error.

Counts cover the whole board, never one workspace, so no label names a tenant. Revoked
hosts are left out. Cached and bounded like the hosts' freshness gauge; the composition
root hands it to /metrics (board.metrics.routes).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from psycopg_pool import AsyncConnectionPool

from board.health.hot import is_hot
from board.health.missing import HostState, absent_gpus, listed_gpus
from board.hosts.freshness import freshness

HEALTH = ("ok", "hot", "missing", "not_observed")
CACHE_SECONDS = 5.0
QUERY_TIMEOUT = "2s"

_HOSTS = """
SELECT h.workspace_id, h.id, h.latest_observed_at, h.latest_collection_status, h.latest_tick,
       w.stale_after_seconds, w.hot_temperature_c, now()
FROM hosts h
JOIN workspaces w ON w.id = h.workspace_id
WHERE h.revoked_at IS NULL
"""
# The newest observation's temperatures of the given hosts (any workspace).
_TEMPERATURES = """
SELECT h.id, r.gpu_id, r.gpu_temperature_c
FROM hosts h
CROSS JOIN LATERAL raw_observations(h.workspace_id, h.id, h.latest_observed_at,
                                    h.latest_observed_at) r
WHERE h.id = ANY(%s)
"""


class GpuHealth:
    """The gauge's values of one process, cached for CACHE_SECONDS."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._at = float("-inf")

    async def counts(self, pool: AsyncConnectionPool[Any]) -> dict[str, int]:
        if time.monotonic() - self._at < CACHE_SECONDS:
            return self._counts
        counts = dict.fromkeys(HEALTH, 0)
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(f"SET LOCAL statement_timeout = '{QUERY_TIMEOUT}'")
            rows = await (await conn.execute(_HOSTS)).fetchall()
            states: dict[int, list[HostState]] = defaultdict(list)
            thresholds: dict[int, int] = {}
            now = None
            for workspace_id, host_id, observed_at, status, tick, stale, hot, now in rows:
                fresh = freshness(observed_at, status, now, int(stale)) in ("ok", "partial")
                states[workspace_id].append(HostState(host_id, observed_at, fresh))
                thresholds[host_id] = int(hot)
                if not fresh:
                    counts["not_observed"] += len(listed_gpus(tick))
            fresh_ids = [s.host_id for found in states.values() for s in found if s.fresh]
            if fresh_ids:
                cur = await conn.execute(_TEMPERATURES, [fresh_ids])
                for host_id, _gpus, temperatures in await cur.fetchall():
                    for temperature in temperatures:
                        hot = is_hot(temperature, thresholds[host_id])
                        counts["hot" if hot else "ok"] += 1
            for workspace_id, found in states.items():
                gone = await absent_gpus(conn, workspace_id, found)
                counts["missing"] += sum(1 for m in gone if now is not None and m.missing(now))
        self._counts, self._at = counts, time.monotonic()
        return counts

    async def family(self, pool: AsyncConnectionPool[Any]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "gua_board_gpus",
            "GPUs of enrolled, unrevoked hosts by health (ok, hot, missing, not_observed).",
            labels=["health"],
        )
        for health, count in (await self.counts(pool)).items():
            family.add_metric([health], count)
        return family
