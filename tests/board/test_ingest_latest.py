"""The newest tick kept on the host row, and the read of raw samples when it is missing."""

from __future__ import annotations

from datetime import timedelta

from tests.board.builders import enroll, example, make_tenant, minutes_ago, push, retimed
from tests.board.db import rows, scalar


async def _figures(app, slug: str) -> list[tuple]:
    return await rows(
        app,
        """
        SELECT g.uuid, sum(r.covered_us), sum(r.active_us), sum(r.idle_held_us), sum(r.idle_us),
               sum(r.util_pct_us), sum(r.sample_count)
        FROM gpu_hour_rollups r
        JOIN gpus g ON g.workspace_id = r.workspace_id AND g.id = r.gpu_id
        JOIN workspaces w ON w.id = r.workspace_id
        WHERE w.slug = %s GROUP BY g.uuid ORDER BY g.uuid
        """,
        slug,
    )


async def _users(app, slug: str) -> list[tuple]:
    return await rows(
        app,
        """
        SELECT r.linux_user, sum(r.held_us), sum(r.active_us), sum(r.idle_held_us)
        FROM user_hour_rollups r JOIN workspaces w ON w.id = r.workspace_id
        WHERE w.slug = %s GROUP BY r.linux_user ORDER BY r.linux_user
        """,
        slug,
    )


async def test_missing_latest_tick_is_read_from_raw_samples(app, client) -> None:
    """Right after the upgrade that added latest_tick, hosts have none: same figures."""
    start = minutes_ago(5)
    first = retimed(example("observation-1.8.0-fake.json"), start)
    second = retimed(example("observation-1.3.0-fake.json"), start + timedelta(seconds=30))
    for slug in ("kept", "lost"):
        tenant = await make_tenant(app, slug, password=None)
        host = await enroll(client, tenant)
        assert (await push(client, host["agentToken"], first)).status_code == 202
        if slug == "lost":
            await scalar(app, "UPDATE hosts SET latest_tick = NULL RETURNING 1")
        assert (await push(client, host["agentToken"], second)).status_code == 202

    kept = await _figures(app, "kept")
    assert [row[1] for row in kept] == [30_000_000] * 3  # three GPUs, 30 s each
    assert await _figures(app, "lost") == kept
    assert await _users(app, "lost") == await _users(app, "kept")
    assert [u[0] for u in await _users(app, "kept")] == ["alice", "bob", "unknown"]


async def test_latest_tick_follows_the_newest_observation_only(app, client) -> None:
    tenant = await make_tenant(app, "acme", password=None)
    host = await enroll(client, tenant)
    newest = retimed(example("observation-1.8.0-fake.json"), minutes_ago(1))
    older = retimed(example("observation-1.3.0-error-heartbeat.json"), minutes_ago(2))
    assert (await push(client, host["agentToken"], newest)).status_code == 202
    tick = await scalar(app, "SELECT latest_tick FROM hosts")
    assert (await push(client, host["agentToken"], older)).status_code == 202
    # A late observation is stored and counted, but the newest state stays.
    assert await scalar(app, "SELECT latest_tick FROM hosts") == tick
    assert await scalar(app, "SELECT count(*) FROM host_observations") == 2
