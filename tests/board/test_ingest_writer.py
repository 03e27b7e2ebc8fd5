"""The group-commit writer: a batch that fails in the database fails only its bad item."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from board.ingest import writer
from tests.board.builders import enroll, example, make_tenant, minutes_ago, push, retimed
from tests.board.db import execute, rows, scalar


async def test_one_bad_item_does_not_fail_its_batch(app, client, monkeypatch) -> None:
    batches: list[int] = []
    real_store_batch = writer.store_batch

    entered, release = asyncio.Event(), asyncio.Event()

    async def recording(conn, observations, cache, prepared=None, job_cache=None):
        batches.append(len(observations))
        if len(batches) == 1:  # the first batch holds the writer while the rest queue up
            entered.set()
            await release.wait()
        return await real_store_batch(conn, observations, cache, prepared, job_cache)

    monkeypatch.setattr(writer, "store_batch", recording)
    tenant = await make_tenant(app, "acme", password=None)
    hosts = [await enroll(client, tenant, f"vm-{i}") for i in range(4)]
    # A rule only the database knows, so the bad push passes validation and fails the
    # batch's transaction: the writer must retry the others alone.
    await execute(
        app, "ALTER TABLE host_observations ADD CONSTRAINT no_77 CHECK (77 <> ALL (gpu_util_pct))"
    )
    at = minutes_ago(1)
    bodies = [retimed(example("observation-1.8.0-fake.json"), at) for _ in hosts]
    bodies[2]["gpus"][0]["utilPct"] = 77
    # The first push is stored alone and held there (the writer takes no other batch while
    # one is being prepared), so the other three, the bad one among them, queue up and
    # share the next transaction however fast each arrives.
    calls = [push(client, h["agentToken"], b) for h, b in zip(hosts, bodies, strict=True)]
    first = asyncio.ensure_future(calls[0])
    await asyncio.wait_for(entered.wait(), timeout=60)
    rest = asyncio.gather(*calls[1:])
    queue = app.state.runtime.writer._queue
    deadline = asyncio.get_running_loop().time() + 60
    while queue.qsize() < len(calls) - 1:
        assert asyncio.get_running_loop().time() < deadline, "the other pushes never queued"
        await asyncio.sleep(0.05)
    release.set()
    answers = [await first, *await rest]
    assert [r.status_code for r in answers] == [202, 202, 503, 202]
    # The bad push shared its transaction with two others, which were then retried alone.
    assert batches == [1, 3, 1, 1, 1], batches
    assert isinstance(answers[2].json()["detail"], str)
    stored = await rows(
        app,
        "SELECT h.display_name FROM host_observations o JOIN hosts h "
        "ON h.workspace_id = o.workspace_id AND h.id = o.host_id ORDER BY 1",
    )
    assert [r[0] for r in stored] == ["vm-0", "vm-1", "vm-3"]
    # Nothing of the failed push is left: no samples, no newest state, no rollups.
    failed = hosts[2]["hostId"]
    assert (
        await scalar(app, "SELECT latest_observed_at FROM hosts WHERE public_id = %s", failed)
        is None
    )
    # The next push of that host goes through as usual.
    later = retimed(example("observation-1.8.0-fake.json"), at + timedelta(seconds=30))
    assert (await push(client, hosts[2]["agentToken"], later)).status_code == 202
