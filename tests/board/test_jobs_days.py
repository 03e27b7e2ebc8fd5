"""Job figures per UTC day (board.jobs.days, docs/jobs.md "Day rows"): day rows
hand-computed from hour rows; every write of hour rows marks its days dirty (a record's
re-crediting, which leaves the GPU-hour rollups alone, and a rebuild too); the refresh
takes closed days only and is idempotent; and the jobs report gives the same figures
from day rows as from hours alone, on random data, with dirty days, and in
America/New_York."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from board.jobs.days import hour_ranges, refresh_job_days
from board.jobs.report import jobs_report as build_report
from board.jobs.report import parse_query
from board.maintenance import maintain_once
from board.reportkit.params import parse_window
from board.reservations.rebuild import rebuild_hours
from tests.board.job_builders import MINUTE, M, job, job_figures, record
from tests.board.jobs_report_builders import HOUR_US, add_figure, add_job, connect, fleet
from tests.board.test_jobs_crediting import host, series, start_at
from tests.board.test_reports_builders import days_ago_midnight, quick_tenant

DAY = datetime(2026, 11, 2, tzinfo=UTC)
H = timedelta(hours=1)
D = timedelta(days=1)
LATER = datetime(2027, 1, 1, tzinfo=UTC)  # every day of these tests is closed by then


async def marks(app: Any, ws: int) -> list[datetime]:
    async with await connect(app) as conn:
        cur = await conn.execute(
            "SELECT day_start FROM job_dirty_days WHERE workspace_id = %s ORDER BY 1", [ws]
        )
        return [row[0] for row in await cur.fetchall()]


async def day_rows(app: Any, ws: int) -> dict[tuple[int, int, datetime], tuple[int, ...]]:
    async with await connect(app) as conn:
        cur = await conn.execute(
            "SELECT job_id, gpu_id, day_start, host_id, covered_us, active_us, idle_held_us, "
            "foreign_us, unused_us, util_pct_us, max_memory_used_mb FROM job_day_figures "
            "WHERE workspace_id = %s",
            [ws],
        )
        return {(r[0], r[1], r[2]): tuple(r[3:]) for r in await cur.fetchall()}


async def refresh(app: Any, now: datetime = LATER) -> int:
    async with await connect(app) as conn:
        return await refresh_job_days(conn, now)


async def test_day_rows_sum_the_hours_of_closed_days_and_refresh_is_idempotent(app, client) -> None:
    tenant = await quick_tenant(app, "jdays")
    where = await fleet(app, client, tenant)
    a, _ = await add_job(app, where, "1", "alice", "p", "gpu", DAY - 2 * H, DAY + 26 * H, [0, 1])
    first, second, third = DAY - D, DAY, DAY + D
    # GPU 0: two hours of the first day, one of the second; GPU 1: one of the third.
    await add_figure(app, where, a, 0, DAY - 2 * H, active=0.5, unused=0.5, util=60, memory=900)
    await add_figure(app, where, a, 0, DAY - H, idle_held=0.75, foreign=0.25, memory=1200)
    await add_figure(app, where, a, 0, DAY + 3 * H, active=1, util=100, memory=300)
    await add_figure(app, where, a, 1, DAY + 25 * H, unused=0.5, memory=10)
    assert await marks(app, where.ws) == [first, second, third]
    # During the second day only the first is closed.
    assert await refresh(app, now=second + 12 * H) == 1
    assert await marks(app, where.ws) == [second, third]
    h = HOUR_US
    expected = {
        (a, where.gpus[0], first): (
            where.host_id,
            2 * h,  # covered
            h // 2,  # active
            3 * h // 4,  # idle-held
            h // 4,  # foreign
            h // 2,  # unused
            60 * h // 2,  # utilization × active µs
            1200,  # the most memory of the day
        ),
    }
    assert await day_rows(app, where.ws) == expected
    # At the third day's very end it is closed too.
    assert await refresh(app, now=third + D) == 2
    expected[(a, where.gpus[0], second)] = (where.host_id, h, h, 0, 0, 0, 100 * h, 300)
    expected[(a, where.gpus[1], third)] = (where.host_id, h // 2, 0, 0, 0, h // 2, 0, 10)
    assert await day_rows(app, where.ws) == expected
    assert await marks(app, where.ws) == []
    # Nothing marked: nothing to do; marked again with no change: the same rows.
    assert await refresh(app) == 0
    async with await connect(app) as conn:
        await conn.execute(
            "UPDATE job_hour_figures SET covered_us = covered_us WHERE workspace_id = %s",
            [where.ws],
        )
    assert await marks(app, where.ws) == [first, second, third]
    assert await refresh(app) == 3
    assert await day_rows(app, where.ws) == expected
    # A day whose hours all went: its day rows go too.
    async with await connect(app) as conn:
        await conn.execute(
            "DELETE FROM job_hour_figures WHERE workspace_id = %s AND hour_start >= %s",
            [where.ws, third],
        )
    assert await marks(app, where.ws) == [third]
    assert await refresh(app) == 1
    del expected[(a, where.gpus[1], third)]
    assert await day_rows(app, where.ws) == expected


async def test_refresh_is_bounded_per_run(app, client) -> None:
    tenant = await quick_tenant(app, "jdays")
    where = await fleet(app, client, tenant)
    a, _ = await add_job(app, where, "1", "alice", "p", "gpu", DAY, DAY + 10 * D, [0])
    for day in range(10):
        await add_figure(app, where, a, 0, DAY + day * D, active=1, util=50)
    async with await connect(app) as conn:
        assert await refresh_job_days(conn, LATER, days_per_run=8) == 8
        assert await refresh_job_days(conn, LATER, days_per_run=8) == 2
    assert await marks(app, where.ws) == []
    assert len(await day_rows(app, where.ws)) == 10


async def test_the_maintenance_schedule_refreshes_job_days(app, client) -> None:
    tenant = await quick_tenant(app, "jdays")
    where = await fleet(app, client, tenant)
    a, _ = await add_job(app, where, "1", "alice", "p", "gpu", DAY, DAY + H, [0])
    await add_figure(app, where, a, 0, DAY, active=1, util=50, memory=5)
    await maintain_once(app.state.runtime)
    assert await marks(app, where.ws) == []
    h = HOUR_US
    assert await day_rows(app, where.ws) == {
        (a, where.gpus[0], DAY): (where.host_id, h, h, 0, 0, 0, 50 * h, 5)
    }


async def test_a_record_change_and_a_rebuild_mark_their_days_dirty(app, client) -> None:
    """Re-crediting a changed record writes job figures only (not the GPU-hour rollups,
    whose own marks stay clear); the job figures' trigger marks the day regardless."""
    tenant = await quick_tenant(app, "jdays")
    ws, h, token = await host(app, client, tenant, "n1")
    s = start_at()
    day = days_ago_midnight(1)
    await record(app, ws, job("108", s, None, {h: (0,)}))
    await series(client, token, s - MINUTE, ["active"] * 14)
    assert await refresh(app) == 1
    async with await connect(app) as conn:
        await conn.execute("DELETE FROM rollup_dirty_days WHERE workspace_id = %s", [ws])
    [before] = (await day_rows(app, ws)).values()
    assert before[1:3] == (12 * M, 12 * M)  # covered and active: 12 minutes
    await record(app, ws, job("108", s, s + 6 * MINUTE, {h: (0,)}))
    assert await marks(app, ws) == [day]
    async with await connect(app) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM rollup_dirty_days WHERE workspace_id = %s", [ws]
        )
        assert await cur.fetchone() == (0,)
    assert await refresh(app) == 1
    after = await day_rows(app, ws)
    assert [v[1:3] for v in after.values()] == [(6 * M, 6 * M)]
    # The day rows say what the hours say.
    hours = await job_figures(app, ws)
    assert sum(v[0] for v in hours.values()) == 6 * M
    # A rebuild rewrites the hours: their day is marked, and refreshed to the same rows.
    async with await connect(app) as conn:
        async with conn.transaction():
            await rebuild_hours(conn, ws, day, day + D)
    assert await marks(app, ws) == [day]
    assert await refresh(app) == 1
    assert await day_rows(app, ws) == after


def test_hour_ranges_are_the_edges_and_the_dirty_days() -> None:
    start, end = DAY + 5 * H, DAY + 4 * D + 3 * H
    d0, d1 = DAY + D, DAY + 4 * D
    assert hour_ranges(start, end, d0, d1, ()) == [(start, d0), (d1, end)]
    assert hour_ranges(start, end, d0, d1, (d0, d0 + 2 * D)) == [
        (start, d0 + D),
        (d0 + 2 * D, end),
    ]
    assert hour_ranges(start, end, start, start, ()) == [(start, end)]


async def _random_jobs(app: Any, client: Any, seed: int) -> tuple[int, list[tuple[int, str]]]:
    """Runs of 4 Linux users on 3 GPUs over 6 days, each hour of each run's GPU with
    random figures (some hours unobserved); returns the workspace and (run, user)s."""
    rng = random.Random(seed)
    tenant = await quick_tenant(app, f"jrand{seed}")
    where = await fleet(app, client, tenant)
    runs = []
    for device in range(3):
        at = DAY - D + timedelta(minutes=rng.randrange(0, 600))
        n = 0
        while at < DAY + 5 * D:
            length = timedelta(minutes=rng.randrange(60, 40 * 60))
            user = f"user{rng.randrange(4)}"
            n += 1
            job_id, _ = await add_job(
                app,
                where,
                f"{device}-{n}",
                user,
                f"acct{rng.randrange(3)}",
                "gpu",
                at,
                at + length,
                [device],
            )
            runs.append((job_id, user))
            hour = at.replace(minute=0)
            while hour < at + length:
                if rng.random() < 0.85:
                    parts = [rng.randrange(0, 16) / 64 for _ in range(4)]
                    await add_figure(
                        app,
                        where,
                        job_id,
                        device,
                        hour,
                        active=parts[0],
                        idle_held=parts[1],
                        foreign=parts[2],
                        unused=parts[3],
                        util=rng.randrange(0, 101),
                        memory=rng.randrange(0, 80_000),
                    )
                hour += H
            at += length + timedelta(minutes=rng.randrange(0, 300))
    return where.ws, runs


async def _both(
    app: Any, ws: int, frm: str, to: str, tz: str | None, group: str, user: str | None = None
) -> tuple[Any, Any]:
    window = parse_window(frm, to, tz)
    query = parse_query(window, group, None, user, None)
    now = DAY + 10 * D
    async with await connect(app) as conn:
        from_days = await build_report(conn, ws, query, now=now)
        from_hours = await build_report(conn, ws, query, now=now, day_rows=False)
    return from_days.as_json(), from_hours.as_json()


async def test_the_report_from_day_rows_equals_the_report_from_hours(app, client) -> None:
    ws, runs = await _random_jobs(app, client, seed=29)
    assert await refresh(app) > 0
    # Some closed days change after their refresh: dirty, read from their hours.
    async with await connect(app) as conn:
        await conn.execute(
            "UPDATE job_hour_figures SET active_us = active_us + 1000, covered_us = covered_us "
            "+ 1000, max_memory_used_mb = max_memory_used_mb + 7 "
            "WHERE workspace_id = %s AND hour_start >= %s AND hour_start < %s",
            [ws, DAY + D + 5 * H, DAY + D + 9 * H],
        )
    assert await marks(app, ws) == [DAY + D]
    windows = [
        ("2026-11-02", "2026-11-06"),  # whole UTC days, one of them dirty
        ("2026-11-01T07:00:00Z", "2026-11-06T13:00:00Z"),  # hours at both edges
        ("2026-11-03T00:00:00Z", "2026-11-04T00:00:00Z"),  # the dirty day alone
        ("2026-11-02T05:00:00Z", "2026-11-02T20:00:00Z"),  # no whole day
    ]
    compared = 0
    for frm, to in windows:
        for tz in (None, "America/New_York"):
            for group in ("job", "user", "account", "partition", "day"):
                from_days, from_hours = await _both(app, ws, frm, to, tz, group)
                assert from_days == from_hours, (frm, to, tz, group)
                compared += bool(from_days["rows"])
            from_days, from_hours = await _both(app, ws, frm, to, tz, "job", user=runs[0][1])
            assert from_days == from_hours
    assert compared >= 30
    # The day rows are what the report read for clean days (and hours for the rest): a
    # clean day's day rows altered behind the trigger's back show up, a dirty day's not.
    async with await connect(app) as conn:
        await conn.execute(
            "UPDATE job_day_figures SET covered_us = covered_us + %s, unused_us = unused_us + %s "
            "WHERE workspace_id = %s AND day_start IN (%s, %s)",
            [HOUR_US, HOUR_US, ws, DAY, DAY + D],
        )
    clean_rows = await _count(app, ws, DAY)
    from_days, from_hours = await _both(app, ws, "2026-11-02", "2026-11-04", None, "day")
    by_day = {r["day"]: r for r in from_days["rows"]}
    hour_by_day = {r["day"]: r for r in from_hours["rows"]}
    assert by_day["2026-11-02"]["coveredGpuHours"] == pytest.approx(
        hour_by_day["2026-11-02"]["coveredGpuHours"] + clean_rows, abs=1e-6
    )
    assert by_day["2026-11-03"] == hour_by_day["2026-11-03"]
    # In New York, local days are not UTC days: rows per day read hours only.
    ny = await _both(app, ws, "2026-11-02", "2026-11-04", "America/New_York", "day")
    assert ny[0] == ny[1]


async def _count(app: Any, ws: int, day: datetime) -> int:
    async with await connect(app) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM job_day_figures WHERE workspace_id = %s AND day_start = %s",
            [ws, day],
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])
