"""A host may have at most the workspace's maxGpusPerHost distinct GPUs."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from board.ingest.normalize import Observation
from board.ingest.schemas import SnapshotIn
from board.ingest.store import TooManyGpus
from board.runtime import Runtime
from tests.board.builders import Tenant, enroll, example, make_tenant, push, retimed
from tests.board.db import scalar
from tests.board.test_host_revocation import client_of, second_app  # noqa: F401


def with_gpus(uuids: list[str], at: datetime) -> dict[str, Any]:
    body = retimed(example("observation-1.8.0-fake.json"), at)
    template = body["gpus"][2]  # no processes to speak of
    body["gpus"] = [dict(copy.deepcopy(template), uuid=u, index=i) for i, u in enumerate(uuids)]
    return body


async def set_limit(client: httpx.AsyncClient, tenant: Tenant, limit: int) -> None:
    r = await client.patch(
        f"/api/v1/workspaces/{tenant.slug}/settings",
        json={"maxGpusPerHost": limit},
        headers=tenant.auth(),
    )
    assert r.status_code == 200, r.text
    assert r.json()["maxGpusPerHost"] == limit


async def counts(app: FastAPI) -> tuple[int, int, int]:
    return (
        await scalar(app, "SELECT count(*) FROM gpus"),
        await scalar(app, "SELECT count(*) FROM host_observations"),
        await scalar(app, "SELECT count(*) FROM gpu_samples"),
    )


BASE = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)


def at(seconds: int) -> datetime:
    return BASE + timedelta(seconds=seconds)


async def test_a_push_past_the_limit_is_refused_and_stores_nothing(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    await set_limit(client, tenant, 4)
    r = await push(client, host["agentToken"], with_gpus(["G0", "G1", "G2"], at(0)))
    assert r.status_code == 202, r.text
    r = await push(client, host["agentToken"], with_gpus(["G0", "G1", "G2", "G3"], at(30)))
    assert r.status_code == 202, r.text
    before = await counts(app)
    assert before == (4, 2, 7)

    r = await push(client, host["agentToken"], with_gpus(["G0", "G4"], at(60)))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str)
    assert "limit of 4 GPUs per host" in detail
    assert "maxGpusPerHost" in detail
    assert await counts(app) == before
    shown = (
        await client.get(f"/api/v1/workspaces/acme/hosts/{host['hostId']}", headers=tenant.auth())
    ).json()
    assert [(p["reason"], p["count"], p["lastDetail"]) for p in shown["rejectedPushes"]] == [
        ("too_many_gpus", 1, detail)
    ]
    assert shown["lastSeenAt"] == at(30).isoformat()

    # Known GPUs keep working, also after the limit is lowered below what the host has.
    await set_limit(client, tenant, 2)
    r = await push(client, host["agentToken"], with_gpus(["G3", "G2", "G1", "G0"], at(90)))
    assert r.status_code == 202, r.text
    r = await push(client, host["agentToken"], with_gpus(["G5"], at(120)))
    assert r.status_code == 422


async def test_the_limit_is_per_host(app: FastAPI, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(app, "acme")
    await set_limit(client, tenant, 2)
    one = await enroll(client, tenant, "one")
    two = await enroll(client, tenant, "two")
    for host in (one, two):
        r = await push(client, host["agentToken"], with_gpus(["G0", "G1"], at(0)))
        assert r.status_code == 202, r.text
    r = await push(client, one["agentToken"], with_gpus(["G0", "G1", "G2"], at(30)))
    assert r.status_code == 422
    r = await push(client, one["agentToken"], with_gpus(["A", "B", "C"], at(60)))
    assert r.status_code == 422
    assert await scalar(app, "SELECT count(*) FROM gpus") == 4


@pytest.mark.parametrize("processes", [1, 2])
async def test_concurrent_pushes_cannot_race_past_the_limit(
    app: FastAPI,
    client: httpx.AsyncClient,
    second_app: FastAPI,  # noqa: F811
    processes: int,
) -> None:
    """Many pushes at once, each adding a GPU, through one process or two: the host
    row's lock makes them take turns, so exactly the room left is used."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    await set_limit(client, tenant, 5)
    r = await push(client, host["agentToken"], with_gpus(["G0", "G1", "G2"], at(0)))
    assert r.status_code == 202
    apps = [app, second_app][:processes]
    async with client_of(apps[0]) as first, client_of(apps[-1]) as last:
        clients = [first, last]
        answers = await asyncio.gather(
            *(
                push(clients[i % 2], host["agentToken"], with_gpus(["G0", f"N{i}"], at(30 + i)))
                for i in range(8)
            )
        )
    codes = sorted(r.status_code for r in answers)
    assert codes == [202, 202] + [422] * 6, [r.text for r in answers]
    assert await scalar(app, "SELECT count(*) FROM gpus") == 5
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 3


async def test_the_archive_back_fill_path_is_capped_too(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """The back-fill stores through the same writer: a tick that would pass the limit
    fails with the same refusal (the worker records it on the job)."""
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    await set_limit(client, tenant, 1)
    runtime: Runtime = app.state.runtime
    workspace_id = await scalar(app, "SELECT id FROM workspaces WHERE slug = 'acme'")
    host_id = await scalar(app, "SELECT id FROM hosts WHERE public_id = %s", host["hostId"])
    body = with_gpus(["G0", "G1"], at(0))
    snapshot = SnapshotIn.model_validate(body)
    observation = Observation(workspace_id, host_id, at(0), datetime.now(UTC), snapshot)
    with pytest.raises(TooManyGpus) as refused:
        await runtime.writer.submit(observation)
    assert refused.value.limit == 1
    assert await counts(app) == (0, 0, 0)
