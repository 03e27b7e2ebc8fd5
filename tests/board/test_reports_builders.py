"""Builders shared by the report and rollup tests (this module holds no tests).

Payloads are built the way released agents send them: 1.8.0 with usageState and
process types, 1.3.0 without either.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg

from board.rollups.crediting import GPU_COLUMNS, USER_COLUMNS
from board.rollups.daily import TOTAL_GPU_COLUMNS
from board.runtime import Runtime
from board.workspaces import service as workspaces
from tests.board.builders import Tenant

_pids = itertools.count(1000)
_slugs = itertools.count(1)


def proc(user: str, ptype: str | None = "compute") -> dict[str, Any]:
    body: dict[str, Any] = {"pid": next(_pids), "linuxUser": user, "name": "python"}
    if ptype is not None:
        body["type"] = ptype
    body["memoryUsedMb"] = 1000
    return body


def gpu(
    index: int,
    *,
    util: int = 0,
    state: str | None = None,
    procs: list[dict[str, Any]] | None = None,
    used: int = 1000,
    total: int = 10000,
    power: int | None = 100,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "index": index,
        "uuid": f"GPU-{index}",
        "name": "NVIDIA A100",
        "memoryTotalMb": total,
        "memoryUsedMb": used,
        "utilPct": util,
        "temperatureC": 40,
        "powerW": power,
        "processes": procs or [],
    }
    if state is not None:
        body["usageState"] = state
    return body


def observation(
    at: datetime, gpus: list[dict[str, Any]], *, agent: str = "1.8.0", status: str = "ok"
) -> dict[str, Any]:
    return {
        "schemaVersion": "availability.snapshot.v1",
        "collectionStatus": status,
        "errors": [] if status == "ok" else ["nvml_init_failed"],
        "observedAt": at.isoformat(),
        "host": {"hostname": "node", "agentVersion": agent, "driverVersion": "560.35.05"},
        "gpus": gpus,
    }


def days_ago_midnight(days: int) -> datetime:
    """A UTC midnight inside the raw retention, so pushes are accepted."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=days)


async def quick_tenant(app: Any, prefix: str = "rep") -> Tenant:
    """A workspace with one member per role, without password hashing (fast, for loops)."""
    runtime: Runtime = app.state.runtime
    slug = f"{prefix}-{next(_slugs)}"
    async with runtime.sessions() as session:
        workspace = await workspaces.create_workspace(session, slug, slug)
        tokens = {}
        for role in ("admin", "member", "finance"):
            member = await workspaces.add_member(
                session, workspace, f"{role}@{slug}.example", role, None
            )
            tokens[role] = member.api_token
        await session.commit()
    return Tenant(slug, tokens["admin"], tokens["member"], tokens["finance"])


# Before any scenario's history: a value dated then judges all of it.
SINCE_EVER = "2000-01-01T00:00:00Z"


async def set_max_gap(
    client: httpx.AsyncClient, tenant: Tenant, seconds: int, since: str | None = SINCE_EVER
) -> None:
    """maxSampleGapSeconds from `since` (None: from now, as a plain change is)."""
    body: dict[str, object] = {"maxSampleGapSeconds": seconds}
    if since is not None:
        body["maxSampleGapFrom"] = since
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings", json=body, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text


async def report(
    client: httpx.AsyncClient, tenant: Tenant, kind: str, role: str = "finance", **params: str
) -> dict[str, Any]:
    r = await client.get(
        f"/api/v1/workspaces/{tenant.slug}/reports/{kind}", params=params, headers=tenant.auth(role)
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def workspace_id(conn: psycopg.AsyncConnection[Any], slug: str) -> int:
    cur = await conn.execute("SELECT id FROM workspaces WHERE slug = %s", [slug])
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


_GPU = ", ".join(GPU_COLUMNS)
_USER = ", ".join(USER_COLUMNS)


async def rollup_rows(
    conn: psycopg.AsyncConnection[Any], ws: int
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Both rollup tables of a workspace, row by row, every sum (energy included); all-zero
    rows (a credit and its exact un-credit after a re-split) are the same as no row."""
    cur = await conn.execute(
        f"""
        SELECT gpu_id, hour_start, host_id, {_GPU}
        FROM gpu_hour_rollups WHERE workspace_id = %s
          AND ({_GPU}) <> ({", ".join(["0"] * len(GPU_COLUMNS))})
        ORDER BY gpu_id, hour_start
        """,
        [ws],
    )
    gpu_rows = await cur.fetchall()
    cur = await conn.execute(
        f"""
        SELECT gpu_id, linux_user, hour_start, host_id, {_USER}
        FROM user_hour_rollups WHERE workspace_id = %s
          AND ({_USER}) <> ({", ".join(["0"] * len(USER_COLUMNS))})
        ORDER BY gpu_id, linux_user, hour_start
        """,
        [ws],
    )
    return gpu_rows, await cur.fetchall()


def _sums(columns: tuple[str, ...], alias: str = "") -> str:
    return ", ".join(f"{alias}{c}" for c in columns)


async def day_rollups_mismatch(conn: psycopg.AsyncConnection[Any], ws: int) -> list[Any]:
    """Clean days whose day rows (per GPU, per user and GPU, and the totals per user and
    per day) differ from the sum of their hour rows (should be none);
    days marked dirty may differ: reports read their hours."""
    gpu_sums = ", ".join(f"sum({c}) AS {c}" for c in GPU_COLUMNS)
    user_sums = ", ".join(f"sum({c}) AS {c}" for c in USER_COLUMNS)
    gpu_zero = ", ".join(["0"] * len(GPU_COLUMNS))
    total_sums = ", ".join(f"sum({c}) AS {c}" for c in TOTAL_GPU_COLUMNS)
    total_zero = ", ".join(["0"] * len(TOTAL_GPU_COLUMNS))
    user_zero = ", ".join(["0"] * len(USER_COLUMNS))
    cur = await conn.execute(
        f"""
        SELECT * FROM (
        WITH hours AS (
            SELECT gpu_id, date_trunc('day', hour_start, 'UTC') AS day_start, {gpu_sums}
            FROM gpu_hour_rollups WHERE workspace_id = %(ws)s GROUP BY 1, 2
        ), days AS (
            SELECT gpu_id, day_start, {_GPU}
            FROM gpu_day_rollups WHERE workspace_id = %(ws)s
        ), user_hours AS (
            SELECT gpu_id, linux_user, date_trunc('day', hour_start, 'UTC') AS day_start,
                   {user_sums}
            FROM user_hour_rollups WHERE workspace_id = %(ws)s GROUP BY 1, 2, 3
        ), user_days AS (
            SELECT gpu_id, linux_user, day_start, {_USER}
            FROM user_day_rollups WHERE workspace_id = %(ws)s
        ), user_day_hours AS (
            SELECT linux_user, date_trunc('day', hour_start, 'UTC') AS day_start, {user_sums}
            FROM user_hour_rollups WHERE workspace_id = %(ws)s GROUP BY 1, 2
        ), gpu_day_hours AS (
            SELECT date_trunc('day', hour_start, 'UTC') AS day_start, {total_sums}
            FROM gpu_hour_rollups WHERE workspace_id = %(ws)s GROUP BY 1
        ), gpu_totals AS (
            SELECT day_start, {_sums(TOTAL_GPU_COLUMNS)} FROM gpu_day_totals
            WHERE workspace_id = %(ws)s
        ), user_totals AS (
            SELECT linux_user, day_start, {_USER}
            FROM user_day_totals WHERE workspace_id = %(ws)s
        )
        SELECT 'gpu', gpu_id::text, day_start FROM hours FULL JOIN days USING (gpu_id, day_start)
        WHERE ({_sums(GPU_COLUMNS, "hours.")}) IS DISTINCT FROM ({_sums(GPU_COLUMNS, "days.")})
          AND NOT (hours.gpu_id IS NULL AND ({_sums(GPU_COLUMNS, "days.")}) = ({gpu_zero}))
        UNION ALL
        SELECT 'user', gpu_id || '/' || linux_user, day_start
        FROM user_hours FULL JOIN user_days USING (gpu_id, linux_user, day_start)
        WHERE ({_sums(USER_COLUMNS, "user_hours.")})
              IS DISTINCT FROM ({_sums(USER_COLUMNS, "user_days.")})
          AND NOT (user_hours.gpu_id IS NULL
                   AND ({_sums(USER_COLUMNS, "user_days.")}) = ({user_zero}))
        UNION ALL
        SELECT 'user total', linux_user, day_start
        FROM user_day_hours FULL JOIN user_totals USING (linux_user, day_start)
        WHERE ({_sums(USER_COLUMNS, "user_day_hours.")})
              IS DISTINCT FROM ({_sums(USER_COLUMNS, "user_totals.")})
          AND NOT (user_day_hours.linux_user IS NULL
                   AND ({_sums(USER_COLUMNS, "user_totals.")}) = ({user_zero}))
        UNION ALL
        SELECT 'gpu total', '', day_start
        FROM gpu_day_hours FULL JOIN gpu_totals USING (day_start)
        WHERE ({_sums(TOTAL_GPU_COLUMNS, "gpu_day_hours.")})
              IS DISTINCT FROM ({_sums(TOTAL_GPU_COLUMNS, "gpu_totals.")})
          AND NOT (gpu_day_hours.day_start IS NULL
                   AND ({_sums(TOTAL_GPU_COLUMNS, "gpu_totals.")}) = ({total_zero}))
        ) AS differing (kind, key, day_start)
        WHERE NOT EXISTS (SELECT 1 FROM rollup_dirty_days m
                          WHERE m.workspace_id = %(ws)s AND m.day_start = differing.day_start)
        """,
        {"ws": ws},
    )
    return await cur.fetchall()


async def refresh_all_days(app: Any) -> int:
    """Run the day-rollup refresh as if every day were closed; the marks are cleared."""
    from board.db.urls import libpq_url
    from board.rollups.daily import refresh_day_rollups

    url = libpq_url(app.state.runtime.database_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return await refresh_day_rollups(conn, now=datetime.now(UTC) + timedelta(days=3))
