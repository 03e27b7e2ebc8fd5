"""Daily partitions: the whole retention window exists, old days go, nothing catches strays."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import psycopg
import pytest

from board.db.base import Base
from board.observations.maintenance import PARTITIONED_TABLES, partition_name, run_maintenance
from tests.board.builders import enroll, example, make_tenant, push, retimed
from tests.board.db import scalar


async def _children(conn, table: str) -> set[str]:
    cur = await conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s",
        [table],
    )
    return {r[0] for r in await cur.fetchall()}


def test_every_partitioned_table_is_maintained() -> None:
    """The names partitions keeps are the tables the models declare partitioned."""
    import board.metadata  # noqa: F401  (registers every table on Base.metadata)

    declared = {
        name
        for name, table in Base.metadata.tables.items()
        if table.dialect_options["postgresql"].get("partition_by")
    }
    assert declared == set(PARTITIONED_TABLES)


async def test_window_created_and_old_days_dropped(database_url: str) -> None:
    today = date(2030, 1, 10)  # far from the template's real days
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        result = await run_maintenance(conn, retention_days=5, ahead_days=2, today=today)
        children = await _children(conn, "host_observations")
        for offset in range(-5, 3):
            assert partition_name("host_observations", today + timedelta(days=offset)) in children
        assert partition_name("host_observations", today - timedelta(days=6)) not in children
        assert any(
            name.startswith("host_observations_p") for name in result.dropped
        )  # template's days
        again = await run_maintenance(conn, retention_days=5, ahead_days=2, today=today)
        assert again.created == []
        assert again.dropped == []
        later = await run_maintenance(
            conn, retention_days=5, ahead_days=2, today=today + timedelta(days=1)
        )
        assert partition_name("host_observations", today - timedelta(days=5)) in later.dropped
        assert partition_name("host_observations", today + timedelta(days=3)) in later.created


async def test_no_default_partition_catches_rows(database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        for table in PARTITIONED_TABLES:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_partitioned_table pt JOIN pg_class c "
                "ON c.oid = pt.partrelid WHERE c.relname = %s AND pt.partdefid <> 0",
                [table],
            )
            assert (await cur.fetchone())[0] == 0
        with pytest.raises(psycopg.errors.CheckViolation):
            await conn.execute(
                "INSERT INTO host_observations VALUES (1, 1, %s, now(), 'ok', '{}', 'x', 'y', "
                + ", ".join(["'{}'"] * 15)
                + ")",
                [datetime(2000, 1, 1, tzinfo=UTC)],
            )


async def test_days_old_observation_lands_in_its_partition(app, client) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    old = datetime.now(UTC) - timedelta(days=20)
    r = await push(client, host["agentToken"], retimed(example("observation-1.8.0-fake.json"), old))
    assert r.status_code == 202
    table = partition_name("host_observations", old.date())
    assert await scalar(app, f"SELECT count(*) FROM {table}") == 1
    assert await scalar(app, f"SELECT cardinality(gpu_id) FROM {table}") == 3
