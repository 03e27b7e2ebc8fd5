"""Hot GPUs: at or above the workspace's `hotTemperatureC` (85 by default).

A GPU is hot now when its host's newest observation says so (the fleet page, the
metrics); the notice waits until it has been so for HOT_FOR, counted from the data: the
first observation of the unbroken run of hot readings that ends at the newest one (a
reading below the threshold, the GPU missing from an observation, or a gap longer than
maxSampleGap breaks the run). The run is looked for in the last HOT_LOOKBACK of the raw
history only, read just for the hosts that have a hot GPU now.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import psycopg

HOT_FOR = timedelta(minutes=5)
HOT_LOOKBACK = timedelta(hours=1)

# Each host's newest observation's GPUs and temperatures (hot or compacted alike).
_NEWEST = """
    SELECT h.id, r.gpu_id, r.gpu_temperature_c
    FROM hosts h
    CROSS JOIN LATERAL raw_observations(h.workspace_id, h.id, h.latest_observed_at,
                                        h.latest_observed_at) r
    WHERE h.workspace_id = %s AND h.id = ANY(%s)
"""
_RECENT = """
    SELECT o.observed_at, o.gpu_id, o.gpu_temperature_c
    FROM raw_observations(%s, %s, %s, %s) o ORDER BY o.observed_at DESC
"""


def is_hot(temperature: int | None, threshold: int) -> bool:
    return temperature is not None and temperature >= threshold


async def newest_temperatures(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, host_ids: Iterable[int]
) -> dict[int, dict[int, int | None]]:
    """host id -> GPU id -> its temperature in the host's newest observation (None: unread)."""
    found: dict[int, dict[int, int | None]] = defaultdict(dict)
    cur = await conn.execute(_NEWEST, [workspace_id, list(host_ids)])
    for host_id, gpu_ids, temperatures in await cur.fetchall():
        for gpu_id, temperature in zip(gpu_ids, temperatures, strict=True):
            found[host_id][gpu_id] = temperature
    return found


async def hot_since(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    host_id: int,
    gpu_ids: Iterable[int],
    threshold: int,
    latest: datetime,
    max_gap: timedelta,
) -> dict[int, datetime]:
    """GPU id -> the start of its run of hot readings ending at `latest` (absent: not hot
    at `latest`)."""
    wanted = set(gpu_ids)
    cur = await conn.execute(_RECENT, [workspace_id, host_id, latest - HOT_LOOKBACK, latest])
    since: dict[int, datetime] = {}
    running = set(wanted)
    previous: datetime | None = None
    for observed_at, ids, temperatures in await cur.fetchall():
        if previous is not None and previous - observed_at > max_gap:
            break  # a gap: every run ends here
        readings = dict(zip(ids, temperatures, strict=True))
        for gpu_id in list(running):
            if is_hot(readings.get(gpu_id), threshold):
                since[gpu_id] = observed_at
            else:
                running.discard(gpu_id)
        if not running:
            break
        previous = observed_at
    return since
