"""Writing rollup deltas: one multi-row upsert per table, adding to what is there.

Each column travels as one array (board.db.pgtext): integers packed in PostgreSQL's
binary format, strings as one literal, where binding Python lists costs a dumper call
per element.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
_NO_ROLLUP = (0,) * len(GPU_COLUMNS)


def _gpu_hours_upsert(columns: tuple[str, ...]) -> str:
    """Add each row's sums to its GPU hour; `columns` the sums a row carries."""
    names = ", ".join(columns)
    arrays = ", ".join(["%s::bigint[]"] * (4 + len(columns)))
    added = ",\n        ".join(f"{c} = r.{c} + EXCLUDED.{c}" for c in columns)
    return f"""
    INSERT INTO gpu_hour_rollups AS r (workspace_id, gpu_id, hour_start, host_id, {names})
    SELECT ws, gpu_id, to_timestamp(hour * 3600), host_id, {names}
    FROM unnest({arrays}) AS d(ws, gpu_id, hour, host_id, {names})
    ON CONFLICT (workspace_id, gpu_id, hour_start) DO UPDATE SET
        {added}
"""


# The booked sums travel only when a batch has any (five more arrays otherwise empty).
_UPSERT_GPU_HOURS = _gpu_hours_upsert(GPU_COLUMNS)
_UPSERT_BOOKED_GPU_HOURS = _gpu_hours_upsert(GPU_COLUMNS + BOOKED_COLUMNS)


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
) -> list[BigintArray]:
    """The GPU-hour upsert's columns, in key order (so concurrent upserts never deadlock);
    with `booked`, its sums after the rollup's (_UPSERT_BOOKED_GPU_HOURS)."""
    if not booked:
        rows = [
            (workspace_of_host[host], gpu, hour // HOUR_US, host, *delta.gpu[(host, gpu, hour)])
            for host, gpu, hour in sorted(delta.gpu)
        ]
    else:
        rows = [
            (
                workspace_of_host[host],
                gpu,
                hour // HOUR_US,
                host,
                *delta.gpu.get((host, gpu, hour), _NO_ROLLUP),
                *booked.get((host, gpu, hour), _NOT_BOOKED),
            )
            for host, gpu, hour in sorted(delta.gpu.keys() | booked.keys())
        ]
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
) -> None:
    """Add the delta to the hourly rows; `booked`: booked sums per GPU hour to add in the
    same statement (a booking's hours wholly inside it, board.reservations.crediting)."""
    if booked:
        params = gpu_hour_params(workspace_of_host, delta, booked)
        await conn.execute(_UPSERT_BOOKED_GPU_HOURS, params)
    elif delta.gpu:
        await conn.execute(_UPSERT_GPU_HOURS, gpu_hour_params(workspace_of_host, delta))
    if delta.user:
        await conn.execute(_UPSERT_USER_HOURS, user_hour_params(workspace_of_host, delta))
