"""Writing rollup deltas: one multi-row upsert per table, adding to what is there."""

from __future__ import annotations

from typing import Any

import psycopg

from board.rollups.crediting import RollupDelta, from_us


async def upsert_rollup_delta(
    conn: psycopg.AsyncConnection[Any], workspace_of_host: dict[int, int], delta: RollupDelta
) -> None:
    if delta.gpu:
        keys = sorted(delta.gpu)
        cols: list[list[Any]] = [[] for _ in range(12)]
        for host_id, gpu_id, hour in keys:
            row = delta.gpu[(host_id, gpu_id, hour)]
            values = (workspace_of_host[host_id], gpu_id, from_us(hour), host_id, *row)
            for col, value in zip(cols, values, strict=True):
                col.append(value)
        await conn.execute(
            """
            INSERT INTO gpu_hour_rollups AS r (workspace_id, gpu_id, hour_start, host_id,
                covered_us, active_us, idle_held_us, idle_us, util_pct_us, memory_used_mb_us,
                memory_total_mb_us, sample_count)
            SELECT * FROM unnest(%b::bigint[], %b::bigint[], %b::timestamptz[], %b::bigint[],
                %b::bigint[], %b::bigint[], %b::bigint[], %b::bigint[], %b::bigint[],
                %b::bigint[], %b::bigint[], %b::bigint[])
            ON CONFLICT (workspace_id, gpu_id, hour_start) DO UPDATE SET
                covered_us = r.covered_us + EXCLUDED.covered_us,
                active_us = r.active_us + EXCLUDED.active_us,
                idle_held_us = r.idle_held_us + EXCLUDED.idle_held_us,
                idle_us = r.idle_us + EXCLUDED.idle_us,
                util_pct_us = r.util_pct_us + EXCLUDED.util_pct_us,
                memory_used_mb_us = r.memory_used_mb_us + EXCLUDED.memory_used_mb_us,
                memory_total_mb_us = r.memory_total_mb_us + EXCLUDED.memory_total_mb_us,
                sample_count = r.sample_count + EXCLUDED.sample_count
            """,
            cols,
        )
    if delta.user:
        ukeys = sorted(delta.user)
        ucols: list[list[Any]] = [[] for _ in range(8)]
        for host_id, gpu_id, user, hour in ukeys:
            urow = delta.user[(host_id, gpu_id, user, hour)]
            values = (workspace_of_host[host_id], gpu_id, user, from_us(hour), host_id, *urow)
            for col, value in zip(ucols, values, strict=True):
                col.append(value)
        await conn.execute(
            """
            INSERT INTO user_hour_rollups AS r (workspace_id, gpu_id, linux_user, hour_start,
                host_id, held_us, active_us, idle_held_us)
            SELECT * FROM unnest(%b::bigint[], %b::bigint[], %b::text[], %b::timestamptz[],
                %b::bigint[], %b::bigint[], %b::bigint[], %b::bigint[])
            ON CONFLICT (workspace_id, gpu_id, linux_user, hour_start) DO UPDATE SET
                held_us = r.held_us + EXCLUDED.held_us,
                active_us = r.active_us + EXCLUDED.active_us,
                idle_held_us = r.idle_held_us + EXCLUDED.idle_held_us
            """,
            ucols,
        )
