"""The utilization report the board sends (rows written by PostgreSQL, as JSON or CSV:
the API's body, which the host page charts too) is exactly the report built row by row
in Python (tests/board/utilization_oracle.py): same rows, same order, same values, the
same JSON types and the same CSV text, whatever the grouping, bucket, zone, window and
host."""

from __future__ import annotations

import csv
import io
import random
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from board.reportkit import params
from board.reportkit.csv import render_csv
from board.runtime import Runtime
from tests.board.db import execute, scalar
from tests.board.test_reports_builders import quick_tenant, refresh_all_days
from tests.board.utilization_oracle import built_report, sent_body

HOUR_US = 3_600_000_000
# Monday 2026-03-02 .. Friday 2026-03-13 (UTC), across New York's DST change on 03-08.
FIRST = datetime(2026, 3, 2, tzinfo=UTC)
DAYS = 11


async def _fleet(app: Any) -> tuple[str, int, list[tuple[int, int]]]:
    """A workspace with two hosts (one with an awkward name) of two GPUs each."""
    tenant = await quick_tenant(app, "rendered")
    ws = int(await scalar(app, "SELECT id FROM workspaces WHERE slug = %s", tenant.slug))
    gpus: list[tuple[int, int]] = []
    for h, name in enumerate(['node "a" \\ ü', "node-b"]):
        host_id = await scalar(
            app,
            "INSERT INTO hosts (workspace_id, public_id, display_name, hostname, "
            "agent_token_hash, agent_token_prefix) VALUES (%s, gen_random_uuid(), %s, %s, %s, "
            "'gua_agent_x') RETURNING id",
            ws,
            name,
            f"node-{h}",
            secrets.token_bytes(32),
        )
        for i in range(2):
            gpu_id = await scalar(
                app,
                "INSERT INTO gpus (workspace_id, host_id, uuid, gpu_index, name, memory_total_mb) "
                "VALUES (%s, %s, %s, %s, 'NVIDIA H100', 81559) RETURNING id",
                ws,
                host_id,
                f"GPU-{h}-{i}",
                i,
            )
            gpus.append((int(gpu_id), int(host_id)))
    return tenant.slug, ws, gpus


def _hour_row(rng: random.Random) -> tuple[int, ...]:
    """(covered, active, idle_held, idle, util, memory used, memory total) µs-weighted:
    whole hours, tiny amounts (1e-06 h), no memory total (null), and plain noise."""
    kind = rng.choice(["whole", "tiny", "no-memory", "noise", "noise"])
    if kind == "whole":
        return (HOUR_US, HOUR_US, 0, 0, 100 * HOUR_US, 40_000 * HOUR_US, 80_000 * HOUR_US)
    if kind == "tiny":
        return (3_600, 3_600, 0, 0, 1, 0, 3_600 * 80_000)
    covered = rng.randrange(1, HOUR_US + 1)
    active = rng.randrange(0, covered + 1)
    idle_held = rng.randrange(0, covered - active + 1)
    total = 0 if kind == "no-memory" else covered * 81_559
    used = 0 if kind == "no-memory" else rng.randrange(0, total + 1)
    return (
        covered,
        active,
        idle_held,
        covered - active - idle_held,
        rng.randrange(0, 100 * covered + 1),
        used,
        total,
    )


async def _insert_hours(app: Any, rows: list[tuple[Any, ...]]) -> None:
    """Hour rollup rows (workspace, GPU, hour, host, the seven sums), one sample each."""
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO gpu_hour_rollups (workspace_id, gpu_id, hour_start, host_id, "
                "covered_us, active_us, idle_held_us, idle_us, util_pct_us, memory_used_mb_us, "
                "memory_total_mb_us, sample_count) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 1)",
                rows,
            )


async def _load(app: Any, ws: int, gpus: list[tuple[int, int]], seed: int) -> None:
    rng = random.Random(seed)
    rows = []
    for gpu_id, host_id in gpus:
        for hour in range(DAYS * 24):
            if rng.random() < 0.15:
                continue  # hours without data, so buckets differ between GPUs
            rows.append((ws, gpu_id, FIRST + timedelta(hours=hour), host_id, *_hour_row(rng)))
    await _insert_hours(app, rows)


async def _both(app: Any, ws: int, window: params.Window, group: str, bucket: str) -> tuple:
    """The sent JSON (parsed) and the built report's JSON; asserts the CSVs are equal."""
    runtime: Runtime = app.state.runtime
    async with runtime.pool.connection() as conn:
        sent_json = await sent_body(conn, ws, window, group, bucket, "json")
        sent_csv = await sent_body(conn, ws, window, group, bucket, "csv")
        report = await built_report(conn, ws, window, group, bucket)
    assert sent_csv.decode() == render_csv(report)
    assert sent_json == report.body("json")
    return orjson.loads(sent_json), report.as_json()


def _assert_same(sent: dict[str, Any], built: dict[str, Any]) -> None:
    assert sent == built
    for a, b in zip(sent["rows"], built["rows"], strict=True):
        assert list(a) == list(b)  # field order
        assert [type(v) for v in a.values()] == [type(v) for v in b.values()]


WINDOWS = [
    # (from, to, tz): whole UTC days (day rows), hours around them, local days.
    ("2026-03-03", "2026-03-12", "UTC"),
    ("2026-03-02T05:00:00Z", "2026-03-12T19:00:00Z", "UTC"),
    ("2026-03-03", "2026-03-12", "America/New_York"),
    ("2026-03-03", "2026-03-12", "Asia/Tokyo"),
]


@pytest.mark.parametrize("group", ["gpu", "host"])
@pytest.mark.parametrize("bucket", ["day", "hour"])
async def test_sent_json_is_the_built_report(app, group, bucket) -> None:
    slug, ws, gpus = await _fleet(app)
    await _load(app, ws, gpus, seed=7)
    await refresh_all_days(app)  # day rows for the closed days
    # One day changes after its day rows were made: reports read that day's hours.
    await execute(
        app,
        "UPDATE gpu_hour_rollups SET active_us = 0 "
        "WHERE workspace_id = %s AND hour_start >= '2026-03-05' AND hour_start < '2026-03-06'",
        ws,
    )
    assert await scalar(app, "SELECT count(*) FROM rollup_dirty_days WHERE workspace_id = %s", ws)
    for start, end, tz in WINDOWS:
        if bucket == "day" and "T" in start:
            continue  # day buckets of a window cut mid-day are covered below
        window = params.parse_window(start, end, tz)
        sent, built = await _both(app, ws, window, group, bucket)
        assert sent["rows"], (start, end, tz)
        _assert_same(sent, built)


async def test_sent_json_names_and_empty_window(app) -> None:
    slug, ws, gpus = await _fleet(app)
    await _load(app, ws, gpus, seed=3)
    # A window cut mid-day with day buckets: the first bucket starts before the window.
    window = params.parse_window("2026-03-04T06:00:00Z", "2026-03-06", "UTC")
    sent, built = await _both(app, ws, window, "gpu", "day")
    _assert_same(sent, built)
    assert sent["rows"][0]["displayName"] == 'node "a" \\ ü'
    assert sent["rows"][0]["bucketStart"] == "2026-03-04T00:00:00+00:00"
    # Nothing in the window: an empty list, not a broken body.
    window = params.parse_window("2025-01-01", "2025-01-02", "UTC")
    sent, built = await _both(app, ws, window, "host", "day")
    assert sent["rows"] == []
    assert built["rows"] == []


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    figures=st.lists(
        st.tuples(
            st.integers(1, HOUR_US),  # covered
            st.floats(0, 1),  # active share
            st.floats(0, 1),  # idle-held share of the rest
            st.floats(0, 100),  # mean utilization
            st.integers(0, 200_000),  # memory total (MB); 0: unknown
            st.floats(0, 1),  # memory used share
        ),
        min_size=1,
        max_size=6,
    )
)
async def test_any_figures_are_written_as_python_writes_them(app, figures) -> None:
    slug, ws, gpus = await _fleet(app)
    gpu_id, host_id = gpus[0]
    rows = []
    for hour, (covered, active_share, held_share, util, total, used_share) in enumerate(figures):
        active = int(covered * active_share)
        idle_held = int((covered - active) * held_share)
        rows.append(
            (
                ws,
                gpu_id,
                FIRST + timedelta(hours=hour),
                host_id,
                covered,
                active,
                idle_held,
                covered - active - idle_held,
                int(util * covered),
                int(total * used_share * covered),
                total * covered,
            )
        )
    await _insert_hours(app, rows)
    window = params.parse_window("2026-03-02", "2026-03-03", "UTC")
    sent, built = await _both(app, ws, window, "gpu", "hour")
    assert len(sent["rows"]) == len(figures)
    _assert_same(sent, built)


@pytest.mark.parametrize("group", ["gpu", "host"])
async def test_one_host_is_that_hosts_rows_of_the_whole_report(app, group) -> None:
    """What a host page charts: the report narrowed to one host."""
    slug, ws, gpus = await _fleet(app)
    await _load(app, ws, gpus, seed=11)
    await refresh_all_days(app)
    runtime: Runtime = app.state.runtime
    host_id = gpus[-1][1]
    public_id = str(await scalar(app, "SELECT public_id FROM hosts WHERE id = %s", host_id))
    for bucket, (start, end, tz) in [("day", WINDOWS[0]), ("hour", WINDOWS[1])]:
        window = params.parse_window(start, end, tz)
        async with runtime.pool.connection() as conn:
            whole = orjson.loads(await sent_body(conn, ws, window, group, bucket, "json"))
            one = orjson.loads(await sent_body(conn, ws, window, group, bucket, "json", host_id))
            built = await built_report(conn, ws, window, group, bucket, host_id)
        expected = [r for r in whole["rows"] if r["hostId"] == public_id]
        assert expected
        assert len(expected) < len(whole["rows"])
        assert one["rows"] == expected
        assert built.rows == expected


async def test_names_that_are_formulas_are_neutralized_alike(app) -> None:
    """Host and GPU names a spreadsheet would run as formulas: both CSVs put the same
    quote in front of them (the sent one's key cells are Python's, its figures
    PostgreSQL's), and both JSONs carry the names as they are."""
    tenant = await quick_tenant(app, "formulas")
    ws = int(await scalar(app, "SELECT id FROM workspaces WHERE slug = %s", tenant.slug))
    names = ['=HYPERLINK("http://x","y")', "+1", "-2+3", "@SUM(A1)", "\tt", "\rr", "\nn"]
    names += ["\uff1d1", "plain"]
    gpus: list[tuple[int, int]] = []
    for h, name in enumerate(names):
        host_id = await scalar(
            app,
            "INSERT INTO hosts (workspace_id, public_id, display_name, hostname, "
            "agent_token_hash, agent_token_prefix) VALUES (%s, gen_random_uuid(), %s, %s, %s, "
            "'gua_agent_x') RETURNING id",
            ws,
            name,
            name,
            secrets.token_bytes(32),
        )
        gpu_id = await scalar(
            app,
            "INSERT INTO gpus (workspace_id, host_id, uuid, gpu_index, name, memory_total_mb) "
            "VALUES (%s, %s, %s, 0, %s, 81559) RETURNING id",
            ws,
            host_id,
            f"{name}-{h}",
            name,
        )
        gpus.append((int(gpu_id), int(host_id)))
    await _load(app, ws, gpus, seed=5)
    window = params.parse_window("2026-03-03", "2026-03-05", "UTC")
    for group, bucket in [("gpu", "day"), ("host", "hour"), ("gpu", "hour")]:
        sent, built = await _both(app, ws, window, group, bucket)  # the CSVs are equal
        _assert_same(sent, built)
        assert {r["displayName"] for r in sent["rows"]} == set(names)
        async with app.state.runtime.pool.connection() as conn:
            text = (await sent_body(conn, ws, window, group, bucket, "csv")).decode()
        assert '"\'=HYPERLINK(""http://x"",""y"")"' in text
        assert ",'-2+3," in text  # after the host id
        assert ",'\uff1d1," in text
        for row in csv.reader(io.StringIO(text, newline="")):
            assert not any(cell.startswith(tuple("=+-@\t\r\n\uff1d")) for cell in row)
            if row[1] != "displayName":
                assert row[1] in {"plain"} | {"'" + n for n in names if n != "plain"}
