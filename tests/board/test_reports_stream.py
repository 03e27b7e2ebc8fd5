"""The streamed report bodies are byte for byte the buffered ones (service.usage_report
with render_csv; the utilization report built row by row in tests/board/
utilization_oracle.py), for JSON and CSV, every
groupBy and bucket, windows on whole days, mid-day hours and DST zones, in one batch or
many; and a client that goes away mid-body ends the report's query and connection."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import zlib
from typing import Any

import httpx
import pytest

from board.reportkit import params
from board.reportkit.csv import render_csv
from board.reportkit.slots import APPLICATION_NAME
from board.reports import bodies, groupings, service, stream, utilization_stream
from board.runtime import Runtime
from board.workspaces import service as workspaces
from tests.board.db import execute, scalar
from tests.board.test_reports_builders import refresh_all_days
from tests.board.test_reports_rendered import FIRST, WINDOWS, _fleet, _load
from tests.board.test_stream import serve
from tests.board.utilization_oracle import built_report

USERS = ["ann", "=HYPERLINK(1)", "bo ü", "unknown"]
HOUR_US = 3_600_000_000


async def _load_users(app: Any, ws: int, gpus: list[tuple[int, int]], seed: int) -> None:
    rng = random.Random(seed)
    for gpu_id, host_id in gpus:
        for user in rng.sample(USERS, 2):
            await execute(
                app,
                "INSERT INTO user_hour_rollups (workspace_id, gpu_id, linux_user, hour_start, "
                "host_id, held_us, active_us, idle_held_us) "
                "SELECT %s, %s, %s, %s::timestamptz + h * interval '1 hour', %s, "
                "p, p / 3, p - p / 3 FROM generate_series(0, 263) AS h, "
                "LATERAL (SELECT (random() * 3600000000)::bigint AS p) AS r "
                "WHERE h %% 5 <> 1",
                ws,
                gpu_id,
                user,
                FIRST,
                host_id,
            )


async def _fixture(app: Any) -> tuple[str, int, Any]:
    slug, ws, gpus = await _fleet(app)
    await _load(app, ws, gpus, seed=11)
    await _load_users(app, ws, gpus, seed=11)
    await refresh_all_days(app)
    # One day changes after its day rows were made: its hours are read instead.
    await execute(
        app,
        "UPDATE gpu_hour_rollups SET active_us = 0 WHERE workspace_id = %s "
        "AND hour_start >= '2026-03-05' AND hour_start < '2026-03-06'",
        ws,
    )
    return slug, ws, gpus


async def _get(client: httpx.AsyncClient, auth: dict[str, str], url: str) -> bytes:
    r = await client.get(url, headers=auth)
    assert r.status_code == 200, r.text
    return r.content


USAGE_GROUPS = ["user", "host", "gpu", "day"] + [
    ",".join(pair) for pair in itertools.permutations(["user", "host", "gpu", "day"], 2)
]


@pytest.fixture(params=["one batch", "many batches"])
def batches(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "many batches":
        # Batches and fetches that split blocks and rows everywhere.
        monkeypatch.setattr(utilization_stream, "BATCH_ROWS", 37)
        monkeypatch.setattr(utilization_stream, "KEPT_BYTES", 300)
        monkeypatch.setattr(bodies.KeptReader, "FETCH", {"hour": 3, "day": 2})
        monkeypatch.setattr(utilization_stream, "FETCH_ROWS", 5)
        monkeypatch.setattr(stream, "FETCH_ROWS", 5)
    return str(request.param)


async def test_streamed_utilization_is_the_buffered_body(app, client, batches) -> None:
    slug, ws, _ = await _fixture(app)
    auth = await _finance(app, slug)
    runtime: Runtime = app.state.runtime
    for group, bucket, fmt in itertools.product(["gpu", "host"], ["day", "hour"], ["json", "csv"]):
        for start, end, tz in WINDOWS:
            window = params.parse_window(start, end, tz)
            async with runtime.pool.connection() as conn:
                built = await built_report(conn, ws, window, group, bucket)
            expected = built.body(fmt)
            url = (
                f"/api/v1/workspaces/{slug}/reports/utilization?from={start}&to={end}&tz={tz}"
                f"&groupBy={group}&bucket={bucket}&format={fmt}"
            )
            # Rendered live (its closed, clean blocks then kept), then from the kept blocks.
            for attempt in ("live", "kept"):
                got = await _get(client, auth, url)
                assert got == expected, (group, bucket, fmt, start, tz, attempt)
            assert built.rows, (group, bucket, start, tz)
            if fmt == "csv":
                assert got.decode() == render_csv(built)
    assert await scalar(app, "SELECT count(*) FROM report_bodies WHERE workspace_id = %s", ws)


async def test_streamed_usage_is_the_buffered_body(app, client, batches) -> None:
    slug, ws, _ = await _fixture(app)
    auth = await _finance(app, slug)
    runtime: Runtime = app.state.runtime
    for group in USAGE_GROUPS:
        for start, end, tz in WINDOWS:
            window = params.parse_window(start, end, tz)
            keys = groupings.parse_usage_group(group)
            if "day" in keys and "T" in start:
                continue  # cut local days are the same rows; day keys need whole days
            async with runtime.pool.connection() as conn:
                report = await service.usage_report(conn, ws, window, keys)
            assert report.rows
            base = f"/api/v1/workspaces/{slug}/reports/usage?from={start}&to={end}&tz={tz}"
            got = await _get(client, auth, f"{base}&groupBy={group}")
            assert got == report.to_json(), (group, start, tz)
            got = await _get(client, auth, f"{base}&groupBy={group}&format=csv")
            assert got.decode() == render_csv(report), (group, start, tz)


async def test_gzip_is_the_same_body_compressed_once(app, client) -> None:
    """A client accepting gzip gets the body gzipped by the report itself (not again by
    the app's middleware); one that does not gets the text; the bytes agree."""
    slug, _, _ = await _fixture(app)
    auth = await _finance(app, slug)
    start, end, tz = WINDOWS[0]
    base = f"/api/v1/workspaces/{slug}/reports"
    for path in (
        f"utilization?from={start}&to={end}&tz={tz}&groupBy=gpu&bucket=hour",
        f"utilization?from={start}&to={end}&tz={tz}&groupBy=host&bucket=day&format=csv",
        f"usage?from={start}&to={end}&tz={tz}&groupBy=gpu",
        f"usage?from={start}&to={end}&tz={tz}&groupBy=user&format=csv",
    ):
        plain = await client.get(f"{base}/{path}", headers={**auth, "Accept-Encoding": "identity"})
        assert plain.status_code == 200, plain.text
        assert "content-encoding" not in plain.headers
        for refusing in ("gzip;q=0", "br, gzip; q=0.000", "notgzip"):
            r = await client.get(f"{base}/{path}", headers={**auth, "Accept-Encoding": refusing})
            assert "content-encoding" not in r.headers, refusing
            assert r.content == plain.content, refusing
        for attempt in ("live", "kept"):
            async with client.stream(
                "GET", f"{base}/{path}", headers={**auth, "Accept-Encoding": "gzip"}
            ) as packed:
                assert packed.status_code == 200
                assert packed.headers["content-encoding"] == "gzip"
                assert "Accept-Encoding" in packed.headers["vary"]
                raw = b"".join([chunk async for chunk in packed.aiter_raw()])
            # One gzip member whose CRC and length check out (zlib verifies both).
            unpacked = zlib.decompressobj(16 + zlib.MAX_WBITS)
            assert unpacked.decompress(raw) == plain.content, (path, attempt)
            assert unpacked.eof
            assert not unpacked.unused_data


async def test_empty_reports_stream_the_buffered_empty_body(app, client) -> None:
    slug, ws, _ = await _fleet(app)
    auth = await _finance(app, slug)
    runtime: Runtime = app.state.runtime
    window = params.parse_window("2025-01-01", "2025-01-03", "UTC")
    async with runtime.pool.connection() as conn:
        usage = await service.usage_report(conn, ws, window, ("gpu",))
        util = (await built_report(conn, ws, window, "gpu", "hour")).body("csv")
    base = f"/api/v1/workspaces/{slug}/reports"
    got = await _get(client, auth, f"{base}/usage?from=2025-01-01&to=2025-01-03&groupBy=gpu")
    assert got == usage.to_json()
    url = f"{base}/utilization?from=2025-01-01&to=2025-01-03&groupBy=gpu&bucket=hour&format=csv"
    assert await _get(client, auth, url) == util


async def _finance(app: Any, slug: str) -> dict[str, str]:
    """A finance member's token for the fleet's workspace."""
    runtime: Runtime = app.state.runtime
    async with runtime.sessions() as session:
        workspace = await workspaces.get_workspace(session, slug)
        member = await workspaces.add_member(
            session, workspace, f"fin-{time.monotonic_ns()}@x.example", "finance", None
        )
        await session.commit()
    return {"Authorization": f"Bearer {member.api_token}"}


async def _report_backends(app: Any) -> int:
    return int(
        await scalar(
            app,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            APPLICATION_NAME,
        )
    )


async def _wait_for(check: Any, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("days", ["dirty", "keeping", "kept"])
async def test_client_gone_mid_body_ends_the_query_and_frees_the_slot(app, days) -> None:
    """Rendered live (dirty days), rendered and kept as it goes (its own second
    connection), or sent from kept bodies (a server-side cursor): all end with the
    client."""
    slug, ws, gpus = await _fleet(app)
    auth = await _finance(app, slug)
    # ~60 days of hourly rows for 4 GPUs, JSON padded by long names: several MiB, far
    # more than the sockets buffer, so the server must wait for the client mid-body.
    await execute(
        app,
        "UPDATE hosts SET display_name = repeat('n', 2000) || id WHERE workspace_id = %s",
        ws,
    )
    await execute(
        app,
        "INSERT INTO gpu_hour_rollups (workspace_id, gpu_id, hour_start, host_id, covered_us, "
        "active_us, idle_held_us, idle_us, util_pct_us, memory_used_mb_us, "
        "memory_total_mb_us, sample_count) "
        "SELECT %s, g.gpu_id, '2026-01-01'::timestamptz + h * interval '1 hour', g.host_id, "
        "3600000000, 3600000000, 0, 0, 0, 0, 0, 1 "
        "FROM unnest(%s::bigint[], %s::bigint[]) AS g(gpu_id, host_id), "
        "generate_series(0, 1439) AS h",
        ws,
        [g for g, _ in gpus],
        [h for _, h in gpus],
    )
    url = (
        f"/api/v1/workspaces/{slug}/reports/utilization?from=2026-01-01&to=2026-03-01"
        "&groupBy=gpu&bucket=hour"
    )
    if days != "dirty":
        await refresh_all_days(app)
    async with serve(app) as base:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            if days == "kept":
                whole = await http.get(url, headers=auth)
                assert whole.status_code == 200
                assert await scalar(
                    app, "SELECT count(*) FROM report_bodies WHERE workspace_id = %s", ws
                )
            plain = {**auth, "Accept-Encoding": "identity"}
            async with http.stream("GET", url, headers=plain) as r:
                assert r.status_code == 200
                chunks = r.aiter_raw()
                first = await anext(chunks)
                assert first.startswith(b'{"from":')

                async def running() -> bool:
                    return await _report_backends(app) >= 1

                await _wait_for(running, "the report's connection is not open mid-body")
                # The client goes away without reading the rest.
            await r.aclose()

            async def ended() -> bool:
                return await _report_backends(app) == 0

            # Generous: a loaded machine (a CI run twice its usual length) needed over 60 s.
            await _wait_for(
                ended, "the report's query and connection outlived the client", seconds=180
            )
            # Its slot is free again: the workspace's full quota of reports still runs.
            small = url.replace("to=2026-03-01", "to=2026-01-02")
            replies = await asyncio.gather(*(http.get(small, headers=auth) for _ in range(3)))
            assert [reply.status_code for reply in replies] == [200, 200, 200]


async def test_report_statements_are_never_run_on_a_generic_plan(app, monkeypatch) -> None:
    """A report runs its live statement once per batch on one connection: psycopg
    prepares it after five runs, and PostgreSQL would then pick one generic plan, blind
    to the arrays and window of each run (a 90-day per-GPU body took 8x as long on it).
    Report transactions plan every run for its own values."""
    monkeypatch.setattr(utilization_stream, "BATCH_ROWS", 3)
    _, ws, _ = await _fixture(app)
    runtime: Runtime = app.state.runtime
    start, end, tz = WINDOWS[0]
    window = params.parse_window(start, end, tz)
    async with runtime.pool.connection() as conn:
        for _ in range(3):
            await utilization_stream.utilization_body(conn, ws, window, "gpu", "hour", "json")
            await conn.commit()
        cur = await conn.execute(
            "SELECT statement, custom_plans, generic_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%AS k(id, ord, prefix)%%'"
        )
        prepared = await cur.fetchall()
    assert any(custom >= 5 for _, custom, _ in prepared), prepared  # the batches were prepared
    assert all(generic == 0 for _, _, generic in prepared), prepared


def _rollup_scans_under_subquery_scans(plan: dict[str, Any], under: bool = False) -> list[str]:
    """The rollup tables a plan reads below a Subquery Scan (an extra pass per row)."""
    found = []
    if under and plan.get("Relation Name", "").endswith("_rollups"):
        found.append(plan["Relation Name"])
    for child in plan.get("Plans", []):
        found += _rollup_scans_under_subquery_scans(
            child, under or plan["Node Type"] == "Subquery Scan"
        )
    return found


async def test_usage_sums_read_the_rollup_rows_directly(app, monkeypatch) -> None:
    """Each usage report sums a union of day and hour rows. PostgreSQL reads the rows
    straight into the sums only when the union carries just what they read, in their
    order (benchmarks.md, "Reports' unions"); otherwise every row takes one more pass
    (a Subquery Scan in the plan, ~15 % of a report). Every grouping, with hour ranges
    and without, is held to the direct plan; but a team's, whose directory join reads
    the union as a whole."""
    _, ws, _ = await _fixture(app)
    statements: list[tuple[str, dict[str, Any]]] = []
    batches = stream._batches

    def recorded(conn: Any, statement: str, values: dict[str, Any]) -> Any:
        statements.append((statement, values))
        return batches(conn, statement, values)

    monkeypatch.setattr(stream, "_batches", recorded)
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        for (start, end, tz), group in itertools.product(WINDOWS, USAGE_GROUPS):
            window = params.parse_window(start, end, tz)
            chunks = await stream.prepare_usage(conn, ws, window, tuple(group.split(",")), "json")
            b"".join([chunk async for chunk in chunks])
            statement, values = statements[-1]
            cur = await conn.execute(f"EXPLAIN (FORMAT JSON) {statement}", values)
            row = await cur.fetchone()
            assert row is not None
            indirect = _rollup_scans_under_subquery_scans(row[0][0]["Plan"])
            assert not indirect, (group, tz, start, indirect)
            await conn.commit()


async def test_usage_from_day_rows_equals_usage_from_hours(app) -> None:
    """Clean whole days come from the day rows (without a GPU or host key: user_day_totals
    and gpu_day_totals, summed over GPUs; per GPU or host: the per-GPU day rows); the
    same report with every day marked dirty reads the hours alone. Every grouping, every
    window, the same bytes."""
    _, ws, _ = await _fixture(app)
    runtime: Runtime = app.state.runtime

    async def bodies() -> dict[tuple[str, str, str], bytes]:
        found = {}
        async with runtime.pool.connection() as conn:
            for (start, end, tz), group in itertools.product(WINDOWS, ["team", *USAGE_GROUPS]):
                window = params.parse_window(start, end, tz)
                for fmt in ("json", "csv"):
                    chunks = await stream.prepare_usage(
                        conn, ws, window, tuple(group.split(",")), fmt
                    )
                    found[(start, group, fmt)] = b"".join([c async for c in chunks])
                await conn.commit()
        return found

    from_days = await bodies()
    for totals in ("user_day_totals", "gpu_day_totals"):
        assert await scalar(app, f"SELECT count(*) FROM {totals} WHERE workspace_id = %s", ws)
    await execute(
        app,
        "INSERT INTO rollup_dirty_days (workspace_id, day_start) "
        "SELECT DISTINCT workspace_id, day_start FROM gpu_day_rollups WHERE workspace_id = %s "
        "ON CONFLICT DO NOTHING",
        ws,
    )
    from_hours = await bodies()
    assert from_hours.keys() == from_days.keys()
    for key, body in from_days.items():
        assert body == from_hours[key], key
