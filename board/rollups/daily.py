"""Daily rollups per UTC day: the hourly rollups summed, so long reports read 24x fewer rows;
and the GPUs' and the users' day rows summed over GPUs, for reports with no GPU or host
key.

A day row is trusted only while its day is *clean*. A cheap statement-level trigger on
the hourly tables (migration "day rollups refresh") marks every UTC day whose hours a
statement touched in rollup_dirty_days, in the same transaction, whatever path changed
them (ingest, rebuild, retention). Reports read hours for dirty days, day rows for
clean ones; `refresh_day_rollups` (the maintenance schedule) recomputes closed dirty
days from their hours and clears their marks. Summing into the day rows in the ingest
transaction itself was tried first and cost ingest a third more per batch: the same
day rows were rewritten on every push.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
from sqlalchemy import BigInteger, DateTime, Index, PrimaryKeyConstraint, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base
from board.hosts.locks import lock_hosts
from board.rollups.crediting import GPU_COLUMNS, USER_COLUMNS

log = logging.getLogger(__name__)


class GpuDayRollup(Base):
    __tablename__ = "gpu_day_rollups"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    day_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    host_id: Mapped[int] = mapped_column(BigInteger)
    covered_us: Mapped[int] = mapped_column(BigInteger)
    active_us: Mapped[int] = mapped_column(BigInteger)
    idle_held_us: Mapped[int] = mapped_column(BigInteger)
    idle_us: Mapped[int] = mapped_column(BigInteger)
    util_pct_us: Mapped[int] = mapped_column(BigInteger)
    memory_used_mb_us: Mapped[int] = mapped_column(BigInteger)
    memory_total_mb_us: Mapped[int] = mapped_column(BigInteger)
    sample_count: Mapped[int] = mapped_column(BigInteger)
    # Energy (board.rollups.crediting.GPU_COLUMNS): 0 for hours credited before it.
    energy_covered_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    active_energy_uws: Mapped[int] = mapped_column(BigInteger, server_default="0")
    idle_held_energy_uws: Mapped[int] = mapped_column(BigInteger, server_default="0")
    idle_energy_uws: Mapped[int] = mapped_column(BigInteger, server_default="0")

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "gpu_id", "day_start"),
        Index("ix_gpu_day_rollups_workspace_day", "workspace_id", "day_start"),
    )


class UserDayRollup(Base):
    __tablename__ = "user_day_rollups"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    gpu_id: Mapped[int] = mapped_column(BigInteger)
    linux_user: Mapped[str] = mapped_column(Text)
    day_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    host_id: Mapped[int] = mapped_column(BigInteger)
    held_us: Mapped[int] = mapped_column(BigInteger)
    active_us: Mapped[int] = mapped_column(BigInteger)
    idle_held_us: Mapped[int] = mapped_column(BigInteger)
    # The user's share of the energy (board.rollups.crediting.USER_COLUMNS).
    energy_held_us: Mapped[int] = mapped_column(BigInteger, server_default="0")
    active_energy_uws: Mapped[int] = mapped_column(BigInteger, server_default="0")
    idle_held_energy_uws: Mapped[int] = mapped_column(BigInteger, server_default="0")

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "gpu_id", "linux_user", "day_start"),
        Index("ix_user_day_rollups_workspace_day", "workspace_id", "day_start"),
    )


class GpuDayTotal(Base):
    """gpu_day_rollups summed over the workspace's GPUs: a usage report's covered time
    and energy for a clean whole day when it has no GPU or host key (one row a day).

    Only the sums such a report reads (TOTAL_GPU_COLUMNS): a day's memory integrals over
    a whole fleet pass bigint's range at about 1,300 cards of 80 GB (bench/scale.py)."""

    __tablename__ = "gpu_day_totals"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    day_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    covered_us: Mapped[int] = mapped_column(BigInteger)
    active_us: Mapped[int] = mapped_column(BigInteger)
    idle_held_us: Mapped[int] = mapped_column(BigInteger)
    idle_us: Mapped[int] = mapped_column(BigInteger)
    energy_covered_us: Mapped[int] = mapped_column(BigInteger)
    active_energy_uws: Mapped[int] = mapped_column(BigInteger)
    idle_held_energy_uws: Mapped[int] = mapped_column(BigInteger)
    idle_energy_uws: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (PrimaryKeyConstraint("workspace_id", "day_start"),)


class UserDayTotal(Base):
    """user_day_rollups summed over GPUs: what a report keyed by user, team or day alone
    reads for a clean whole day (as many rows a day as users, not user-GPU pairs)."""

    __tablename__ = "user_day_totals"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    day_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    linux_user: Mapped[str] = mapped_column(Text)
    held_us: Mapped[int] = mapped_column(BigInteger)
    active_us: Mapped[int] = mapped_column(BigInteger)
    idle_held_us: Mapped[int] = mapped_column(BigInteger)
    energy_held_us: Mapped[int] = mapped_column(BigInteger)
    active_energy_uws: Mapped[int] = mapped_column(BigInteger)
    idle_held_energy_uws: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (PrimaryKeyConstraint("workspace_id", "day_start", "linux_user"),)


class RollupDirtyDay(Base):
    """A UTC day whose hourly rollups changed since its day rows were last computed."""

    __tablename__ = "rollup_dirty_days"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    day_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    marked_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=text("now()")
    )

    __table_args__ = (PrimaryKeyConstraint("workspace_id", "day_start"),)


class RollupDayVersion(Base):
    """How many times a UTC day's day rows were recomputed (no row: never). Bumped in the
    refresh's own transaction, so a day that is clean and at one version has had the same
    hours in every snapshot that sees it so: any change to its hours marks it dirty in
    the changing transaction, and only a refresh (a new version) clears the mark. Kept
    report bodies (board.reports.bodies) are checked against these versions."""

    __tablename__ = "rollup_day_versions"

    workspace_id: Mapped[int] = mapped_column(BigInteger)
    day_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    version: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (PrimaryKeyConstraint("workspace_id", "day_start"),)


# Serializes the maintenance writers of day rows (refresh, retention) across processes.
DAY_ROLLUP_LOCK_KEY = 0x6775615F64617973  # "gua_days"


# Called in the refresh's transaction with the workspace and the days it refreshed, for
# what other domains derived from those days (the reports' kept bodies) to go with them.
DaysRefreshed = Callable[[psycopg.AsyncConnection[Any], int, list[datetime]], Awaitable[None]]


async def refresh_day_rollups(
    conn: psycopg.AsyncConnection[Any],
    now: datetime | None = None,
    *,
    on_days_refreshed: DaysRefreshed | None = None,
) -> int:
    """Recompute the day rows of every closed, dirty UTC day from its hours; clear the marks.

    A week of one workspace's days per transaction, holding its hosts' locks (in key
    order, like ingest and rebuild), so no rollup write of that workspace is in flight
    while its hours are read; a push that lands afterwards marks its day again. Runs on
    a connection in autocommit mode. Returns the number of days recomputed.
    """
    now = now or datetime.now(UTC)
    cur = await conn.execute(
        "SELECT DISTINCT workspace_id FROM rollup_dirty_days "
        "WHERE day_start <= %s - interval '1 day' ORDER BY 1",
        [now],
    )
    done = 0
    for (ws,) in await cur.fetchall():
        try:
            while days := await _refresh_some(conn, int(ws), now, on_days_refreshed):
                done += days
        except psycopg.errors.DataException:
            # One workspace's figures out of range (its own transaction rolled back, its
            # days stay marked and its reports read their hours) must not hold up the
            # others' days.
            log.exception("day rollups: workspace %s could not be refreshed", ws)
    if done:
        log.info("day rollups: refreshed %d day(s)", done)
    return done


async def _refresh_some(
    conn: psycopg.AsyncConnection[Any],
    ws: int,
    now: datetime,
    on_days_refreshed: DaysRefreshed | None,
) -> int:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", [DAY_ROLLUP_LOCK_KEY])
        await lock_hosts(conn, "h.id", "h.workspace_id = %s", [ws])
        # The marks go first: a write racing in (from a host enrolled after the lock
        # above) finds its day's mark being deleted, waits for this commit and re-marks.
        cur = await conn.execute(
            """
            DELETE FROM rollup_dirty_days
            WHERE workspace_id = %(ws)s AND day_start IN (
                SELECT day_start FROM rollup_dirty_days
                WHERE workspace_id = %(ws)s AND day_start <= %(now)s - interval '1 day'
                ORDER BY day_start LIMIT 7)
            RETURNING day_start
            """,
            {"ws": ws, "now": now},
        )
        days = sorted(r[0] for r in await cur.fetchall())
        if days:
            for statement in _REFRESH:
                await conn.execute(statement, {"ws": ws, "days": days})
            if on_days_refreshed is not None:
                await on_days_refreshed(conn, ws, days)
    return len(days)


_GPU_SUMS = ", ".join(GPU_COLUMNS)
# What gpu_day_totals keeps of the GPUs' day rows: time and energy (board.reports reads
# nothing else from it); µs of a day over 10^8 GPUs, or a day's energy over 10,000 GPUs at
# the 10 kW a reading may claim (board.ingest.schemas.MAX_POWER_W), still fit a bigint.
TOTAL_GPU_COLUMNS = (
    "covered_us",
    "active_us",
    "idle_held_us",
    "idle_us",
    "energy_covered_us",
    "active_energy_uws",
    "idle_held_energy_uws",
    "idle_energy_uws",
)
_USER_SUMS = ", ".join(USER_COLUMNS)


def _summed(columns: tuple[str, ...]) -> str:
    return ", ".join(f"sum(h.{c})" for c in columns)


_DAYS = (
    "JOIN unnest(%(days)s::timestamptz[]) AS d(day) ON h.hour_start >= d.day "
    "AND h.hour_start < d.day + interval '1 day'"
)
_REFRESH = (
    # A new version for each day: what was derived from the days' hours before (kept
    # report bodies) no longer matches, and is never used again (`on_days_refreshed`).
    """
    INSERT INTO rollup_day_versions AS v (workspace_id, day_start, version)
    SELECT %(ws)s, d, 1 FROM unnest(%(days)s::timestamptz[]) AS d ORDER BY d
    ON CONFLICT (workspace_id, day_start) DO UPDATE SET version = v.version + 1
    """,
    "DELETE FROM gpu_day_rollups WHERE workspace_id = %(ws)s AND day_start = ANY(%(days)s)",
    "DELETE FROM user_day_rollups WHERE workspace_id = %(ws)s AND day_start = ANY(%(days)s)",
    "DELETE FROM user_day_totals WHERE workspace_id = %(ws)s AND day_start = ANY(%(days)s)",
    "DELETE FROM gpu_day_totals WHERE workspace_id = %(ws)s AND day_start = ANY(%(days)s)",
    f"""
    INSERT INTO gpu_day_rollups (workspace_id, gpu_id, day_start, host_id, {_GPU_SUMS})
    SELECT h.workspace_id, h.gpu_id, d.day, max(h.host_id), {_summed(GPU_COLUMNS)}
    FROM gpu_hour_rollups h {_DAYS}
    WHERE h.workspace_id = %(ws)s
    GROUP BY h.workspace_id, h.gpu_id, d.day
    """,
    f"""
    INSERT INTO user_day_rollups (workspace_id, gpu_id, linux_user, day_start, host_id,
        {_USER_SUMS})
    SELECT h.workspace_id, h.gpu_id, h.linux_user, d.day, max(h.host_id),
           {_summed(USER_COLUMNS)}
    FROM user_hour_rollups h {_DAYS}
    WHERE h.workspace_id = %(ws)s
    GROUP BY h.workspace_id, h.gpu_id, h.linux_user, d.day
    """,
    # The GPUs' and the users' day rows just written, summed over GPUs.
    f"""
    INSERT INTO gpu_day_totals (workspace_id, day_start, {", ".join(TOTAL_GPU_COLUMNS)})
    SELECT workspace_id, day_start, {", ".join(f"sum({c})" for c in TOTAL_GPU_COLUMNS)}
    FROM gpu_day_rollups
    WHERE workspace_id = %(ws)s AND day_start = ANY(%(days)s)
    GROUP BY workspace_id, day_start
    """,
    f"""
    INSERT INTO user_day_totals (workspace_id, day_start, linux_user, {_USER_SUMS})
    SELECT workspace_id, day_start, linux_user, {", ".join(f"sum({c})" for c in USER_COLUMNS)}
    FROM user_day_rollups
    WHERE workspace_id = %(ws)s AND day_start = ANY(%(days)s)
    GROUP BY workspace_id, day_start, linux_user
    """,
)
