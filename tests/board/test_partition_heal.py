"""A day whose partitions went missing is healed by the ingest path, not answered 503."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
from fastapi import FastAPI

from board.observations.maintenance import PARTITIONED_TABLES, partition_name
from tests.board.builders import enroll, example, make_tenant, push, retimed
from tests.board.db import execute, scalar


async def drop_day(app: FastAPI, day: datetime) -> None:
    for table in PARTITIONED_TABLES:
        await execute(app, f'DROP TABLE "{partition_name(table, day.date())}"')


async def test_a_dropped_day_is_recreated_by_the_next_push(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    other = await enroll(client, tenant, "other")
    now = datetime.now(UTC)
    # Pushed before the drop, so the writer remembers the day as existing.
    r = await push(client, other["agentToken"], retimed(example("observation-1.8.0-fake.json")))
    assert r.status_code == 202
    await drop_day(app, now)

    # A host's first push (new GPUs) and another host's, in the same batch or not.
    answers = await asyncio.gather(
        push(client, host["agentToken"], retimed(example("observation-1.8.0-fake.json"))),
        push(
            client,
            other["agentToken"],
            retimed(example("observation-1.8.0-fake.json"), now + timedelta(seconds=1)),
        ),
    )
    assert [r.status_code for r in answers] == [202, 202], [r.text for r in answers]
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 2
    assert await scalar(app, "SELECT count(*) FROM gpu_samples") == 6
    assert await scalar(app, "SELECT count(*) FROM process_samples") == 8
    for table in PARTITIONED_TABLES:
        name = partition_name(table, now.date())
        assert await scalar(app, "SELECT to_regclass(%s) IS NOT NULL", name)
    # The GPUs created in the failed first attempt were rolled back with it; the samples
    # point at the GPU rows that exist.
    orphans = await scalar(
        app,
        "SELECT count(*) FROM gpu_samples s LEFT JOIN gpus g "
        "ON g.workspace_id = s.workspace_id AND g.id = s.gpu_id WHERE g.id IS NULL",
    )
    assert orphans == 0
    shown = (
        await client.get(f"/api/v1/workspaces/acme/hosts/{host['hostId']}", headers=tenant.auth())
    ).json()
    assert [g["uuid"] for g in shown["gpus"]] == ["GPU-0", "GPU-1", "GPU-2"]


async def test_a_day_never_created_is_created(app: FastAPI, client: httpx.AsyncClient) -> None:
    """Maintenance lagged: yesterday's partitions were never made (none remembered)."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    yesterday = datetime.now(UTC) - timedelta(days=1)
    await drop_day(app, yesterday)
    r = await push(
        client, host["agentToken"], retimed(example("observation-1.8.0-fake.json"), yesterday)
    )
    assert r.status_code == 202, r.text
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 1
