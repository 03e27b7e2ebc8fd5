"""Writing rollup deltas: one multi-row upsert per table, adding to what is there.

Each column travels as one array literal (board.db.pgtext): formatting it is a single
join, where binding Python lists costs a dumper call per element.
"""

from __future__ import annotations

from typing import Any

import psycopg

from board.db.pgtext import int_array, text_array
from board.rollups.crediting import HOUR_US, RollupDelta

_UPSERT_GPU_HOURS = """
    INSERT INTO gpu_hour_rollups AS r (workspace_id, gpu_id, hour_start, host_id,
        covered_us, active_us, idle_held_us, idle_us, util_pct_us, memory_used_mb_us,
        memory_total_mb_us, sample_count)
    SELECT ws, gpu_id, to_timestamp(hour * 3600), host_id, covered_us, active_us,
           idle_held_us, idle_us, util_pct_us, memory_used_mb_us, memory_total_mb_us,
           sample_count
    FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],
                %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],
                %s::bigint[], %s::bigint[])
         AS d(ws, gpu_id, hour, host_id, covered_us, active_us, idle_held_us, idle_us,
              util_pct_us, memory_used_mb_us, memory_total_mb_us, sample_count)
    ON CONFLICT (workspace_id, gpu_id, hour_start) DO UPDATE SET
        covered_us = r.covered_us + EXCLUDED.covered_us,
        active_us = r.active_us + EXCLUDED.active_us,
        idle_held_us = r.idle_held_us + EXCLUDED.idle_held_us,
        idle_us = r.idle_us + EXCLUDED.idle_us,
        util_pct_us = r.util_pct_us + EXCLUDED.util_pct_us,
        memory_used_mb_us = r.memory_used_mb_us + EXCLUDED.memory_used_mb_us,
        memory_total_mb_us = r.memory_total_mb_us + EXCLUDED.memory_total_mb_us,
        sample_count = r.sample_count + EXCLUDED.sample_count
"""

_UPSERT_USER_HOURS = """
    INSERT INTO user_hour_rollups AS r (workspace_id, gpu_id, linux_user, hour_start,
        host_id, held_us, active_us, idle_held_us)
    SELECT ws, gpu_id, linux_user, to_timestamp(hour * 3600), host_id, held_us, active_us,
           idle_held_us
    FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::bigint[], %s::bigint[],
                %s::bigint[], %s::bigint[], %s::bigint[])
         AS d(ws, gpu_id, linux_user, hour, host_id, held_us, active_us, idle_held_us)
    ON CONFLICT (workspace_id, gpu_id, linux_user, hour_start) DO UPDATE SET
        held_us = r.held_us + EXCLUDED.held_us,
        active_us = r.active_us + EXCLUDED.active_us,
        idle_held_us = r.idle_held_us + EXCLUDED.idle_held_us
"""


def gpu_hour_params(workspace_of_host: dict[int, int], delta: RollupDelta) -> list[str]:
    """The GPU-hour upsert's columns, in key order (so concurrent upserts never deadlock)."""
    rows = [
        (workspace_of_host[host], gpu, hour // HOUR_US, host, *delta.gpu[(host, gpu, hour)])
        for host, gpu, hour in sorted(delta.gpu)
    ]
    return [int_array(column) for column in zip(*rows, strict=True)]


def user_hour_params(workspace_of_host: dict[int, int], delta: RollupDelta) -> list[str]:
    rows = []
    for key in sorted(delta.user):
        host, gpu, user, hour = key
        rows.append((workspace_of_host[host], gpu, user, hour // HOUR_US, host, *delta.user[key]))
    workspaces, gpus, users, hours, hosts, *sums = zip(*rows, strict=True)
    return [
        int_array(workspaces),
        int_array(gpus),
        text_array(users),
        int_array(hours),
        int_array(hosts),
        *(int_array(column) for column in sums),
    ]


async def upsert_rollup_delta(
    conn: psycopg.AsyncConnection[Any], workspace_of_host: dict[int, int], delta: RollupDelta
) -> None:
    if delta.gpu:
        await conn.execute(_UPSERT_GPU_HOURS, gpu_hour_params(workspace_of_host, delta))
    if delta.user:
        await conn.execute(_UPSERT_USER_HOURS, user_hour_params(workspace_of_host, delta))
