"""A run's UTC hours wholly inside it, which no other run of the GPU touches, are kept on
the GPU-hour row (gpu_hour_rollups.job_*), as a booking's are; its partial hours and
hours two runs share, in job_hour_figures (board.jobs.crediting). Records that start or
stop a neighbour's sharing move its hours between the two; every reader sums both
(job_hours), and what ingest and re-crediting leave equals a rebuild from raw."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from alembic import command

from board.db.migrate import alembic_config
from board.jobs.days import refresh_job_days
from board.jobs.retention import drop_expired_job_hours
from board.reservations.rebuild import rebuild_hours
from tests.board.job_builders import MINUTE, connect, job, job_figures, record, totals
from tests.board.test_jobs_crediting import host, series
from tests.board.test_reports_builders import days_ago_midnight, quick_tenant

HOUR = timedelta(hours=1)
BEFORE_MIGRATION = "0188b06eecde"  # the revision before "job hours on GPU rows"
M = 60 * 10**6  # a minute in µs


async def placement(
    app: Any, ws: int
) -> tuple[dict[datetime, int], dict[tuple[str, datetime], int]]:
    """Covered µs per hour on GPU 0's GPU-hour rows (with the run named there), and per
    (raw job id, hour) in figure rows."""
    async with await connect(app) as conn:
        cur = await conn.execute(
            "SELECT r.hour_start, r.job_covered_us FROM gpu_hour_rollups r "
            "JOIN scheduler_jobs j ON j.workspace_id = r.workspace_id AND j.id = r.job_id "
            "WHERE r.workspace_id = %s AND r.job_covered_us <> 0",
            [ws],
        )
        rides = {row[0]: int(row[1]) for row in await cur.fetchall()}
        cur = await conn.execute(
            "SELECT j.raw_job_id, f.hour_start, f.covered_us FROM job_hour_figures f "
            "JOIN scheduler_jobs j ON j.workspace_id = f.workspace_id AND j.id = f.job_id "
            "WHERE f.workspace_id = %s AND f.covered_us <> 0",
            [ws],
        )
        figures = {(row[0], row[1]): int(row[2]) for row in await cur.fetchall()}
    return rides, figures


async def rebuilt_equals_credited(app: Any, ws: int, lo: datetime, hi: datetime) -> None:
    credited = await job_figures(app, ws)
    async with await connect(app) as conn:
        async with conn.transaction():
            await rebuild_hours(conn, ws, lo, hi)
    assert await job_figures(app, ws) == credited


async def test_whole_hours_ride_on_the_gpu_rows_and_move_when_runs_share_them(
    app: Any, client: Any
) -> None:
    tenant = await quick_tenant(app, "rides")
    ws, h, token = await host(app, client, tenant, "node-1")
    t0 = days_ago_midnight(1) + 6 * HOUR
    # Run 1 from 06:40 to 09:20 on GPU 0; observed every minute from 06:30 to 09:30.
    await record(app, ws, job("1", t0 + 40 * MINUTE, t0 + 3 * HOUR + 20 * MINUTE, {h: (0,)}))
    await series(client, token, t0 + 30 * MINUTE, ["active"] * 181)
    rides, figures = await placement(app, ws)
    # 07:00 and 08:00 are wholly inside it and nobody else's: on the GPU-hour rows.
    assert rides == {t0 + HOUR: 60 * M, t0 + 2 * HOUR: 60 * M}
    assert figures == {("1", t0): 20 * M, ("1", t0 + 3 * HOUR): 20 * M}
    assert totals(await job_figures(app, ws))["1"][:2] == (160 * M, 160 * M)

    # Run 2 recorded afterwards, 08:30-08:40 on the same GPU (overlapping records): the
    # 08:00 hour is shared now, so run 1's part of it moves to a figure row, run 2's too.
    await record(
        app, ws, job("2", t0 + 2 * HOUR + 30 * MINUTE, t0 + 2 * HOUR + 40 * MINUTE, {h: (0,)})
    )
    rides, figures = await placement(app, ws)
    assert rides == {t0 + HOUR: 60 * M}
    assert figures == {
        ("1", t0): 20 * M,
        ("1", t0 + 2 * HOUR): 60 * M,
        ("2", t0 + 2 * HOUR): 10 * M,
        ("1", t0 + 3 * HOUR): 20 * M,
    }
    assert totals(await job_figures(app, ws))["1"][:2] == (160 * M, 160 * M)
    await rebuilt_equals_credited(app, ws, t0, t0 + 4 * HOUR)

    # Run 2's record corrected to after run 1 (09:25-09:30): the 08:00 hour is run 1's
    # alone again and goes back to its GPU-hour row; run 2's minutes are at 09:00.
    await record(
        app, ws, job("2", t0 + 3 * HOUR + 25 * MINUTE, t0 + 3 * HOUR + 30 * MINUTE, {h: (0,)})
    )
    rides, figures = await placement(app, ws)
    assert rides == {t0 + HOUR: 60 * M, t0 + 2 * HOUR: 60 * M}
    assert figures == {
        ("1", t0): 20 * M,
        ("1", t0 + 3 * HOUR): 20 * M,
        ("2", t0 + 3 * HOUR): 5 * M,
    }
    await rebuilt_equals_credited(app, ws, t0, t0 + 4 * HOUR)

    # The day rows sum both places.
    async with await connect(app) as conn:
        await refresh_job_days(conn)
        cur = await conn.execute(
            "SELECT j.raw_job_id, d.covered_us FROM job_day_figures d "
            "JOIN scheduler_jobs j ON j.workspace_id = d.workspace_id AND j.id = d.job_id "
            "WHERE d.workspace_id = %s ORDER BY 1",
            [ws],
        )
        assert [(r[0], int(r[1])) for r in await cur.fetchall()] == [("1", 160 * M), ("2", 5 * M)]


async def test_a_run_sharing_a_gpu_from_the_start_keeps_figure_rows(app: Any, client: Any) -> None:
    """Two runs recorded before any observation, overlapping on one GPU for an hour: ingest
    routes the shared hour to figure rows from the first sample (its view has both)."""
    tenant = await quick_tenant(app, "rides")
    ws, h, token = await host(app, client, tenant, "node-1")
    t0 = days_ago_midnight(1) + 6 * HOUR
    await record(
        app,
        ws,
        job("1", t0, t0 + 2 * HOUR, {h: (0,)}),
        job("2", t0 + HOUR + 50 * MINUTE, t0 + 3 * HOUR, {h: (0,)}, user="bob"),
    )
    await series(client, token, t0, ["active"] * 181)
    rides, figures = await placement(app, ws)
    assert rides == {t0: 60 * M, t0 + 2 * HOUR: 60 * M}  # run 1's 06:00, run 2's 08:00
    assert figures == {("1", t0 + HOUR): 60 * M, ("2", t0 + HOUR): 10 * M}
    await rebuilt_equals_credited(app, ws, t0, t0 + 4 * HOUR)


async def test_expired_job_hours_go_with_the_rollup_hours(app: Any, client: Any) -> None:
    tenant = await quick_tenant(app, "rides")
    ws, h, token = await host(app, client, tenant, "node-1")
    t0 = days_ago_midnight(3) + 6 * HOUR
    await record(app, ws, job("1", t0 + 30 * MINUTE, t0 + 2 * HOUR, {h: (0,)}))
    await series(client, token, t0, ["active"] * 121)
    async with await connect(app) as conn:
        await conn.execute("UPDATE workspaces SET retention_days = 1 WHERE id = %s", [ws])
        assert await drop_expired_job_hours(conn, min_days=2) > 0
        cur = await conn.execute(
            "SELECT count(*) FROM job_hour_figures WHERE workspace_id = %s", [ws]
        )
        assert (await cur.fetchone()) == (0,)


async def test_migration_moves_whole_hours_both_ways(
    app: Any, client: Any, database_url: str
) -> None:
    tenant = await quick_tenant(app, "rides")
    ws, h, token = await host(app, client, tenant, "node-1")
    t0 = days_ago_midnight(1) + 6 * HOUR
    await record(app, ws, job("1", t0 + 40 * MINUTE, t0 + 3 * HOUR + 20 * MINUTE, {h: (0,)}))
    await series(client, token, t0 + 30 * MINUTE, ["active"] * 181)
    good = await job_figures(app, ws)
    config = alembic_config(database_url)
    async with await connect(app) as conn:
        await asyncio.to_thread(command.downgrade, config, BEFORE_MIGRATION)
        cur = await conn.execute(
            "SELECT hour_start, covered_us FROM job_hour_figures WHERE workspace_id = %s "
            "ORDER BY 1",
            [ws],
        )
        assert [(r[0], int(r[1])) for r in await cur.fetchall()] == [
            (t0, 20 * M),
            (t0 + HOUR, 60 * M),
            (t0 + 2 * HOUR, 60 * M),
            (t0 + 3 * HOUR, 20 * M),
        ]
        await asyncio.to_thread(command.upgrade, config, "head")
    assert await job_figures(app, ws) == good
    rides, figures = await placement(app, ws)
    assert rides == {t0 + HOUR: 60 * M, t0 + 2 * HOUR: 60 * M}
    assert figures == {("1", t0): 20 * M, ("1", t0 + 3 * HOUR): 20 * M}
