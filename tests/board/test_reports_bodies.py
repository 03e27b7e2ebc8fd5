"""Kept report bodies (board.reports.bodies): sent only while right. A late observation
for a closed, kept day shows at once (its day is dirty: rendered live), and after the
refresh too (a new version); a renamed host shows its new name; the gzip stream that
stitches kept segments and live text is one valid member; bodies are not kept once per
zone name a reader cares to name."""

from __future__ import annotations

import random
import zlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from board.reportkit import deflated, params
from board.reportkit.streaming import Part, gzipped, plain
from board.reports import bodies
from board.reports.bodies import MAX_OTHER_ZONES
from board.runtime import Runtime
from tests.board.db import execute, scalar
from tests.board.money_builders import base, held_hours
from tests.board.test_reports_builders import quick_tenant, refresh_all_days
from tests.board.test_reports_rendered import FIRST as FIRST_DAY
from tests.board.test_reports_stream import _finance, _fixture, _get
from tests.board.utilization_oracle import built_report


def test_python_crc32_combine_is_zlibs() -> None:
    rng = random.Random(5)
    for _ in range(50):
        a = rng.randbytes(rng.randrange(0, 300))
        b = rng.randbytes(rng.randrange(0, 3000))
        expected = zlib.crc32(a + b)
        assert deflated._crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == expected
        assert deflated.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == expected


async def _parts(items: list[Part]) -> AsyncIterator[Part]:
    for item in items:
        yield item


async def test_gzip_of_text_and_segments_is_one_member() -> None:
    rng = random.Random(7)
    items: list[Part] = []
    text = b""
    for i in range(200):
        piece = b"".join(b'{"n":%d,"x":%d},' % (i, rng.randrange(99)) for _ in range(30))
        text += piece
        items.append(deflated.deflate(piece) if i % 3 else piece)
    items.append(deflated.deflate(b""))
    raw = b"".join([c async for c in gzipped(_parts(items))])
    unpacked = zlib.decompressobj(16 + zlib.MAX_WBITS)
    assert unpacked.decompress(raw) == text
    assert unpacked.eof
    assert not unpacked.unused_data
    assert b"".join([c async for c in plain(_parts(items))]) == text


@pytest.mark.parametrize(
    ("group", "bucket", "tz"),
    [("host", "hour", "UTC"), ("gpu", "day", "UTC"), ("gpu", "day", "America/New_York")],
)
async def test_kept_bodies_follow_late_data_refreshes_and_renames(
    app: Any, client: Any, monkeypatch: pytest.MonkeyPatch, group: str, bucket: str, tz: str
) -> None:
    slug, ws, _ = await _fixture(app)
    auth = await _finance(app, slug)
    runtime: Runtime = app.state.runtime
    start, end = "2026-03-03", "2026-03-12"
    window = params.parse_window(start, end, tz)
    url = (
        f"/api/v1/workspaces/{slug}/reports/utilization?from={start}&to={end}&tz={tz}"
        f"&groupBy={group}&bucket={bucket}"
    )
    sent_kept: list[int] = []
    take = bodies.KeptReader.take

    async def counting(self: bodies.KeptReader, ordinal: int) -> dict[int, deflated.Deflated]:
        found = await take(self, ordinal)
        sent_kept.append(len(found))
        return found

    monkeypatch.setattr(bodies.KeptReader, "take", counting)

    async def expected() -> bytes:
        async with runtime.pool.connection() as conn:
            return (await built_report(conn, ws, window, group, bucket)).body("json")

    async def check(what: str, kept_blocks: bool) -> None:
        sent_kept.clear()
        assert await _get(client, auth, url) == await expected(), what
        assert (sum(sent_kept) > 0) == kept_blocks, (what, sent_kept)

    await check("first: rendered live", kept_blocks=False)
    await check("then: kept", kept_blocks=True)

    # A late observation for a closed day whose blocks are kept: the day is dirty now.
    before = await expected()
    await execute(
        app,
        "UPDATE gpu_hour_rollups SET active_us = active_us / 2, util_pct_us = 0 "
        "WHERE workspace_id = %s AND hour_start = '2026-03-07T10:00:00Z'",
        ws,
    )
    assert await expected() != before
    await check("late data, its day dirty", kept_blocks=True)
    # The refresh clears the mark and bumps the day's version: its blocks are rendered
    # again (the others still kept), then kept at the new version.
    assert await refresh_all_days(app)
    await check("after the refresh", kept_blocks=True)
    await check("after the refresh, kept again", kept_blocks=True)
    assert await scalar(
        app,
        "SELECT count(*) FROM rollup_day_versions WHERE workspace_id = %s "
        "AND day_start = '2026-03-07'",
        ws,
    )

    # A host renamed: its rows carry the new name.
    await execute(
        app,
        "UPDATE hosts SET display_name = 'renamed' WHERE workspace_id = %s "
        "AND id = (SELECT min(id) FROM hosts WHERE workspace_id = %s)",
        ws,
        ws,
    )
    assert b'"renamed"' in await expected()
    await check("renamed", kept_blocks=True)


async def test_keeping_that_fails_leaves_the_report_alone() -> None:
    """A kept body that cannot be written (database gone, a lock held too long) is
    logged and keeping stops; nothing is raised into the body."""
    import psycopg

    calls = 0

    async def connect() -> Any:
        nonlocal calls
        calls += 1
        raise psycopg.OperationalError("the database is away")

    keeper = bodies.Keeper(connect, 1, "utilization:gpu:day:json:UTC", flush_bytes=1)
    block = bodies.Piece(FIRST_DAY, None, (1, 2), (FIRST_DAY, FIRST_DAY), 1)
    await keeper.add(1, b"p", block, deflated.deflate(b",{}"))
    await keeper.add(2, b"p", block, deflated.deflate(b",{}"))
    await keeper.flush()
    await keeper.close()
    assert keeper.failed
    assert calls == 1


MANY_ZONES = (
    "Europe/Berlin",
    "Asia/Tokyo",
    "America/New_York",
    "Europe/Paris",
    "Asia/Dubai",
    "Etc/GMT-3",
)


async def test_kept_bodies_do_not_grow_with_every_zone_a_reader_names(
    app: Any, client: httpx.AsyncClient, database_url: str
) -> None:
    """Utilization bodies are kept per report kind, zone included: a finance script
    cycling through the zone database stored a copy of the history per name (~600
    names, and again under posix/ and right/). Now UTC, the workspace's zone and at most
    MAX_OTHER_ZONES others."""
    import psycopg

    from board.db.urls import libpq_url
    from board.rollups.daily import refresh_day_rollups

    tenant = await quick_tenant(app, "kept")
    start = (datetime.now(UTC) - timedelta(days=3)).replace(
        hour=5, minute=0, second=0, microsecond=0
    )
    await held_hours(client, tenant, start, {"NVIDIA A100": "alice", "NVIDIA H100": "bob"})
    async with await psycopg.AsyncConnection.connect(
        libpq_url(database_url), autocommit=True
    ) as conn:
        await refresh_day_rollups(conn)
    r = await client.patch(
        f"{base(tenant)}/settings", json={"timezone": "Africa/Lagos"}, headers=tenant.auth()
    )
    assert r.status_code == 200, r.text
    window = f"from={start:%Y-%m-%d}T00:00:00Z&to={start + timedelta(days=2):%Y-%m-%d}T00:00:00Z"
    for zone in ("UTC", "Africa/Lagos", *MANY_ZONES):
        for bucket in ("hour", "day"):
            url = f"{base(tenant)}/reports/utilization?{window}&groupBy=gpu&bucket={bucket}"
            r = await client.get(f"{url}&tz={zone}", headers=tenant.auth("finance"))
            assert r.status_code == 200, (zone, r.text[:300])
            assert r.json()["rows"], (zone, r.text[:300])
            # Asked again: the same bytes, kept or not.
            again = await client.get(f"{url}&tz={zone}", headers=tenant.auth("finance"))
            assert again.content == r.content, zone
    async with await psycopg.AsyncConnection.connect(libpq_url(database_url)) as conn:
        cur = await conn.execute(
            "SELECT DISTINCT split_part(b.report, ':', 5) FROM report_bodies b "
            "JOIN workspaces w ON w.id = b.workspace_id WHERE w.slug = %s",
            [tenant.slug],
        )
        zones = {row[0] for row in await cur.fetchall()}
    assert {"UTC", "Africa/Lagos"} <= zones, zones
    assert len(zones - {"UTC", "Africa/Lagos"}) <= MAX_OTHER_ZONES, zones
