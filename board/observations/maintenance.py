"""Daily partitions of the raw history: created ahead, dropped past the raw retention.

Every day inside the retention window gets a partition, past days included: a
replaying agent or an archive may deliver days-old observations. There is no default
partition, so a row outside the window fails loudly instead of landing somewhere silently.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

# The raw history's hot rows (board/observations/tables.py), partitioned by day here. Its
# compacted hours (observation_hours) are one row per host and hour, few enough for one
# table: retention deletes them below, and queries over both plan one partitioned side.
PARTITIONED_TABLES = ("host_observations",)

_CHILD = re.compile(r"^(?P<parent>[a-z_]+)_p(?P<day>\d{8})$")
# Serializes maintenance across board processes sharing one database.
MAINTENANCE_LOCK_KEY = 0x6775615F70617274  # "gua_part"


def partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def window_days(today: date, retention_days: int, ahead_days: int) -> list[date]:
    """Every UTC day a partition must exist for: the retention window plus days ahead."""
    first = today - timedelta(days=retention_days)
    return [first + timedelta(days=i) for i in range(retention_days + ahead_days + 1)]


@dataclass
class MaintenanceResult:
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    compacted_hours_deleted: int = 0  # observation_hours rows past retention


async def existing_partitions(conn: psycopg.AsyncConnection[Any]) -> dict[str, set[date]]:
    found: dict[str, set[date]] = {t: set() for t in PARTITIONED_TABLES}
    cur = await conn.execute(
        """
        SELECT child.relname
        FROM pg_inherits
        JOIN pg_class parent ON parent.oid = pg_inherits.inhparent
        JOIN pg_class child ON child.oid = pg_inherits.inhrelid
        WHERE parent.relname = ANY(%s)
        """,
        [list(PARTITIONED_TABLES)],
    )
    for (relname,) in await cur.fetchall():
        m = _CHILD.match(str(relname))
        if m and m["parent"] in found:
            found[m["parent"]].add(datetime.strptime(m["day"], "%Y%m%d").date())
    return found


async def create_partitions(conn: psycopg.AsyncConnection[Any], days: list[date]) -> list[str]:
    """Create the missing daily partitions for the given UTC days (idempotent)."""
    have = await existing_partitions(conn)
    created: list[str] = []
    for table in PARTITIONED_TABLES:
        for day in sorted(set(days) - have[table]):
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            await conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {child} PARTITION OF {parent} "
                    "FOR VALUES FROM ({start}) TO ({end})"
                ).format(
                    child=sql.Identifier(partition_name(table, day)),
                    parent=sql.Identifier(table),
                    start=sql.Literal(start),
                    end=sql.Literal(start + timedelta(days=1)),
                )
            )
            created.append(partition_name(table, day))
    return created


async def create_days(conn: psycopg.AsyncConnection[Any], days: list[date]) -> list[str]:
    """Create the given days' missing partitions now, waiting for any maintenance run.

    For the ingest path, which found a day without its partition (dropped, or the
    schedule lagged). The maintenance lock keeps board processes that heal the same
    day at once from racing each other's CREATE. Autocommit mode, like maintenance.
    """
    await conn.execute("SELECT pg_advisory_lock(%s)", [MAINTENANCE_LOCK_KEY])
    try:
        created = await create_partitions(conn, days)
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", [MAINTENANCE_LOCK_KEY])
    if created:
        log.warning("partitions: ingest created missing %s", ", ".join(created))
    return created


async def run_maintenance(
    conn: psycopg.AsyncConnection[Any],
    *,
    retention_days: int,
    ahead_days: int,
    today: date | None = None,
) -> MaintenanceResult:
    """Create the window's partitions, drop those wholly past retention (and the compacted
    hours of those days); rollups untouched.

    Runs in autocommit mode; an advisory lock keeps two board processes from racing.
    """
    today = today or datetime.now(UTC).date()
    result = MaintenanceResult()
    cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", [MAINTENANCE_LOCK_KEY])
    row = await cur.fetchone()
    if not row or not row[0]:
        log.info("partition maintenance already running elsewhere")
        return result
    try:
        result.created = await create_partitions(
            conn, window_days(today, retention_days, ahead_days)
        )
        oldest_kept = today - timedelta(days=retention_days)
        have = await existing_partitions(conn)
        for table in PARTITIONED_TABLES:
            for day in sorted(have[table]):
                if day < oldest_kept:
                    name = partition_name(table, day)
                    await conn.execute(
                        sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name))
                    )
                    result.dropped.append(name)
        cur = await conn.execute(
            "DELETE FROM observation_hours WHERE hour_start < %s",
            [datetime(oldest_kept.year, oldest_kept.month, oldest_kept.day, tzinfo=UTC)],
        )
        result.compacted_hours_deleted = cur.rowcount
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", [MAINTENANCE_LOCK_KEY])
    if result.created or result.dropped:
        log.info("partitions: created %d, dropped %d", len(result.created), len(result.dropped))
    return result
