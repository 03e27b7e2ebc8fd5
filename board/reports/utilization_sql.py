"""The utilization report's SQL: its figures per GPU or host and bucket, from the hour,
host-hour and day rollups (board.reports.repository has the report scope and the rest).
"""

from __future__ import annotations

from typing import Any

import psycopg

from board.reports.repository import Scope

# Each figure as an integer number of millionths (hours or percent), named here.
FIGURES = ("covered", "active", "idle_held", "idle", "util_pct", "memory_pct")


def _figures(c: str, a: str, ih: str, i: str, u: str, mu: str, mt: str) -> str:
    """Hours rounded half up to millionths in integer arithmetic (as service.hours),
    time-weighted mean utilization and memory use in millionths of a percent; and the
    covered microseconds themselves (the coverage total is their sum)."""
    return f"""
        ({c} + 1800) / 3600 AS covered,
        ({a} + 1800) / 3600 AS active,
        ({ih} + 1800) / 3600 AS idle_held,
        ({i} + 1800) / 3600 AS idle,
        round(1e6 * ({u})::float8 / {c})::bigint AS util_pct,
        round(1e8 * ({mu})::float8 / nullif({mt}, 0))::bigint AS memory_pct,
        {c} AS covered_us"""


def hour_bucket_sql(bucket: str, column: str = "hour_start") -> str:
    """The first instant of the bucket an hour falls in: itself, or its local day's first
    hour (params.Window.day_start): the day's midnight raised to a whole UTC hour, so a
    day of Asia/Kolkata (+05:30) is named by its 00:30, the first hour it holds."""
    if bucket != "day":
        return column
    midnight = f"date_trunc('day', {column}, %(tz)s)"
    return f"(date_trunc('hour', {midnight} - interval '1 microsecond', 'UTC') + interval '1 hour')"


def utilization_figures_sql(
    group: str, bucket: str, one_host: bool = False, keyed: bool = False
) -> str:
    """SELECT of (key: gpu_id or host_id, bucket, the FIGURES) per key and bucket.

    A bucket is at most a day. Hours come from the GPU-hour rows per GPU and from the
    host-hour rows per host (one row per host and hour: nothing is summed for an hourly
    per-host report). Whole UTC days come from the GPU day rows (summed per host for a
    host); the hours around them are summed into their buckets, which never coincide
    with a whole day's bucket. `one_host`: only the rows of the host %(host)s. `keyed`:
    only the keys in %(keys)s (a streamed report reads its keys a batch at a time).
    """
    key = "gpu_id" if group == "gpu" else "host_id"
    hour_table = "gpu_hour_rollups" if group == "gpu" else "host_hour_rollups"
    only = ("AND host_id = %(host)s " if one_host else "") + (
        f"AND {key} = ANY(%(keys)s)" if keyed else ""
    )
    ranges = f"""
        FROM {hour_table}
        JOIN unnest(%(lo)s::timestamptz[], %(hi)s::timestamptz[]) AS rg(lo, hi)
          ON hour_start >= rg.lo AND hour_start < rg.hi
        WHERE workspace_id = %(ws)s {only}"""
    if bucket == "hour":
        # An hour row is its GPU's (or host's) bucket already.
        figures = _figures(
            "covered_us",
            "active_us",
            "idle_held_us",
            "idle_us",
            "util_pct_us",
            "memory_used_mb_us",
            "memory_total_mb_us",
        )
        return f"""
            SELECT {key} AS key, hour_start AS bucket, {figures}
            {ranges} AND covered_us > 0
        """
    # A bucket is named by its first instant; day rows (only used when the report's
    # days are UTC days) already start their bucket.
    buckets = f"""
        SELECT {key} AS key, day_start AS bucket, covered_us AS c, active_us AS a,
               idle_held_us AS ih, idle_us AS i, util_pct_us AS u, memory_used_mb_us AS mu,
               memory_total_mb_us AS mt
        FROM gpu_day_rollups
        WHERE workspace_id = %(ws)s AND day_start >= %(d0)s AND day_start < %(d1)s
          AND NOT day_start = ANY(%(dirty)s::timestamptz[]) {only}
        UNION ALL
        SELECT {key}, {hour_bucket_sql(bucket)}, sum(covered_us)::bigint,
               sum(active_us)::bigint, sum(idle_held_us)::bigint, sum(idle_us)::bigint,
               sum(util_pct_us)::bigint, sum(memory_used_mb_us)::bigint,
               sum(memory_total_mb_us)::bigint
        {ranges}
        GROUP BY 1, 2
    """
    if group == "gpu":
        return f"""
            SELECT key, bucket, {_figures("c", "a", "ih", "i", "u", "mu", "mt")}
            FROM ({buckets}) AS b
            WHERE c > 0
        """
    # A GPU's uncovered time adds nothing to any sum, so a host's bucket is simply the
    # sum of its GPUs' rows (bigint is ample for a host-day).
    sums = (f"sum({c})::bigint" for c in ("c", "a", "ih", "i", "u", "mu", "mt"))
    return f"""
        SELECT key, bucket, {_figures(*sums)}
        FROM ({buckets}) AS b
        GROUP BY key, bucket
        HAVING sum(c) > 0
    """


async def utilization_rows(
    conn: psycopg.AsyncConnection[Any], scope: Scope, group: str, bucket: str
) -> list[tuple[Any, ...]]:
    """(gpu_id or host_id, bucket start in epoch seconds, coveredHours …
    avgMemoryUsedPct), each GPU's (or host's) rows together and in time order."""
    statement = f"""
        SELECT key, extract(epoch FROM bucket)::bigint,
               {", ".join(f"{f}::float8 / 1e6" for f in FIGURES)}
        FROM ({utilization_figures_sql(group, bucket, scope.host_id is not None)}) AS f
        ORDER BY key, bucket
    """
    # Binary results of plain numbers: 90,000 rows load noticeably faster than as text
    # or with timestamps (the client-side decoding is most of this report's cost).
    async with conn.cursor(binary=True) as cur:
        await cur.execute(statement, scope.params())
        return await cur.fetchall()
