"""Writing rollup deltas: one multi-row upsert per table, adding to what is there.

Each column travels as one array (board.db.pgtext): integers packed in PostgreSQL's
binary format, strings as one literal, where binding Python lists costs a dumper call
per element.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import psycopg

from board.db.pgtext import BigintArray, bigint_array, text_array
from board.rollups.crediting import GPU_COLUMNS, HOUR_US, USER_COLUMNS, GpuHourKey, RollupDelta

# Booked time of a GPU hour that lies wholly inside one booking (how it was spent, µs;
# board.reservations.crediting routes it here), in the order of a booked row.
BOOKED_COLUMNS = (
    "booked_covered_us",
    "booked_used_us",
    "booked_idle_held_us",
    "booked_conflict_us",
    "booked_unused_us",
)
_NOT_BOOKED = (0,) * len(BOOKED_COLUMNS)
# A scheduler job run's figures of a GPU hour wholly inside the run, which no other run
# of the GPU touches (board.jobs.crediting routes them here): the run first (0: none
# credited with a positive sign in this delta: the row keeps the one it names), then its
# sums, the most memory last (a maximum, not a sum).
RIDE_COLUMNS = (
    "job_id",
    "job_covered_us",
    "job_active_us",
    "job_idle_held_us",
    "job_foreign_us",
    "job_unused_us",
    "job_util_pct_us",
    "job_max_memory_used_mb",
)
_NO_RIDE = (0,) * len(RIDE_COLUMNS)
_NO_ROLLUP = (0,) * len(GPU_COLUMNS)
# A row whose run changes (a record moved the hour from one run to another, both credited
# in one delta) starts its most memory afresh; the same run's only grows.
_RIDE_SET = """job_id = coalesce(EXCLUDED.job_id, r.job_id),
        job_max_memory_used_mb = CASE
            WHEN EXCLUDED.job_id IS DISTINCT FROM r.job_id AND EXCLUDED.job_id IS NOT NULL
            THEN EXCLUDED.job_max_memory_used_mb
            ELSE GREATEST(r.job_max_memory_used_mb, EXCLUDED.job_max_memory_used_mb) END"""


@cache
def _gpu_hours_upsert(booked: bool, rides: bool) -> str:
    """Add each row's sums to its GPU hour: the rollup's, and the booked or job sums
    when a delta has any (more arrays, otherwise empty)."""
    columns = GPU_COLUMNS + (BOOKED_COLUMNS if booked else ())
    added = [f"{c} = r.{c} + EXCLUDED.{c}" for c in columns]
    selected = list(columns)
    if rides:
        columns += RIDE_COLUMNS
        selected += ["nullif(job_id, 0)", *RIDE_COLUMNS[1:]]
        added += [f"{c} = r.{c} + EXCLUDED.{c}" for c in RIDE_COLUMNS[1:-1]] + [_RIDE_SET]
    names = ", ".join(columns)
    arrays = ", ".join(["%s::bigint[]"] * (4 + len(columns)))
    sets = ",\n        ".join(added)
    return f"""
    INSERT INTO gpu_hour_rollups AS r (workspace_id, gpu_id, hour_start, host_id, {names})
    SELECT ws, gpu_id, to_timestamp(hour * 3600), host_id, {", ".join(selected)}
    FROM unnest({arrays}) AS d(ws, gpu_id, hour, host_id, {names})
    ON CONFLICT (workspace_id, gpu_id, hour_start) DO UPDATE SET
        {sets}
"""


def _user_hours_upsert() -> str:
    """Add each row's sums to its user hour."""
    names = ", ".join(USER_COLUMNS)
    arrays = ", ".join(
        ["%s::bigint[]", "%s::bigint[]", "%s::text[]"] + ["%s::bigint[]"] * (2 + len(USER_COLUMNS))
    )
    added = ",\n        ".join(f"{c} = r.{c} + EXCLUDED.{c}" for c in USER_COLUMNS)
    return f"""
    INSERT INTO user_hour_rollups AS r (workspace_id, gpu_id, linux_user, hour_start,
        host_id, {names})
    SELECT ws, gpu_id, linux_user, to_timestamp(hour * 3600), host_id, {names}
    FROM unnest({arrays}) AS d(ws, gpu_id, linux_user, hour, host_id, {names})
    ON CONFLICT (workspace_id, gpu_id, linux_user, hour_start) DO UPDATE SET
        {added}
"""


_UPSERT_USER_HOURS = _user_hours_upsert()


def gpu_hour_params(
    workspace_of_host: dict[int, int],
    delta: RollupDelta,
    booked: Mapping[GpuHourKey, Sequence[int]] | None = None,
    rides: Mapping[GpuHourKey, Sequence[int]] | None = None,
) -> list[BigintArray]:
    """The GPU-hour upsert's columns, in key order (so concurrent upserts never deadlock);
    with `booked` or `rides`, their sums after the rollup's (_gpu_hours_upsert)."""
    keys = delta.gpu.keys() | (booked or {}).keys() | (rides or {}).keys()
    rows = []
    for key in sorted(keys):
        host, gpu, hour = key
        row = [workspace_of_host[host], gpu, hour // HOUR_US, host]
        row += delta.gpu.get(key, _NO_ROLLUP)
        if booked:
            row += booked.get(key, _NOT_BOOKED)
        if rides:
            row += rides.get(key, _NO_RIDE)
        rows.append(row)
    return [bigint_array(column) for column in zip(*rows, strict=True)]


def user_hour_params(
    workspace_of_host: dict[int, int], delta: RollupDelta
) -> list[BigintArray | str]:
    rows = []
    for key in sorted(delta.user):
        host, gpu, user, hour = key
        rows.append((workspace_of_host[host], gpu, user, hour // HOUR_US, host, *delta.user[key]))
    workspaces, gpus, users, hours, hosts, *sums = zip(*rows, strict=True)
    return [
        bigint_array(workspaces),
        bigint_array(gpus),
        text_array(users),
        bigint_array(hours),
        bigint_array(hosts),
        *(bigint_array(column) for column in sums),
    ]


async def upsert_rollup_delta(
    conn: psycopg.AsyncConnection[Any],
    workspace_of_host: dict[int, int],
    delta: RollupDelta,
    booked: Mapping[GpuHourKey, Sequence[int]] | None = None,
    rides: Mapping[GpuHourKey, Sequence[int]] | None = None,
) -> None:
    """Add the delta to the hourly rows; `booked`: booked sums per GPU hour to add in the
    same statement (a booking's hours wholly inside it, board.reservations.crediting);
    `rides`: a job run's sums per GPU hour, RIDE_COLUMNS (board.jobs.crediting)."""
    if delta.gpu or booked or rides:
        params = gpu_hour_params(workspace_of_host, delta, booked, rides)
        await conn.execute(_gpu_hours_upsert(bool(booked), bool(rides)), params)
    if delta.user:
        await conn.execute(_UPSERT_USER_HOURS, user_hour_params(workspace_of_host, delta))
