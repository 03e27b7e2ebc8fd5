"""`gua-board rollups rebuild`: the command, its window rules, and its locking."""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta
from typing import Any

import psycopg

from board.cli.rollups import rebuild_command
from board.db.urls import libpq_url
from board.rollups.rebuild import rebuild
from tests.board.builders import enroll, push
from tests.board.test_reports_builders import (
    day_rollups_mismatch,
    days_ago_midnight,
    gpu,
    observation,
    proc,
    quick_tenant,
    rollup_rows,
    set_max_gap,
    workspace_id,
)


def _url(app: Any) -> str:
    return libpq_url(app.state.runtime.database_url)


async def _series(app: Any, client: Any) -> tuple[Any, Any]:
    tenant = await quick_tenant(app)
    await set_max_gap(client, tenant, 600)
    host = await enroll(client, tenant)
    d = days_ago_midnight(2)
    held = [gpu(0, util=90, state="active", procs=[proc("hank"), proc("ida")]), gpu(1)]
    # Every other observation is partial: GPU-2, busy and listing no process, is active
    # there (utilization alone) and billed to `unknown`; in the ok ones it is idle.
    partial = [*held, gpu(2, util=60)]
    # Across midnight and several hours, with one gap (20 min) in the middle.
    for i, minutes in enumerate((-30, -25, -20, -10, 0, 5, 25, 30, 60, 65, 125)):
        body = observation(d + timedelta(minutes=minutes), partial if i % 2 else held)
        if i % 2:
            body["collectionStatus"] = "partial"
            body["errors"] = ["process_list_unavailable"]
        assert (await push(client, host["agentToken"], body)).status_code == 202
    return tenant, host


async def test_command_restores_damaged_rollups(app, client, settings, capsys) -> None:
    tenant, _ = await _series(app, client)
    async with await psycopg.AsyncConnection.connect(_url(app), autocommit=True) as conn:
        ws = await workspace_id(conn, tenant.slug)
        good = await rollup_rows(conn, ws)
        assert {row[1] for row in good[1]} == {"hank", "ida", "unknown"}
        await conn.execute(
            "UPDATE gpu_hour_rollups SET covered_us = 1 WHERE workspace_id = %s", [ws]
        )
        await conn.execute("DELETE FROM user_hour_rollups WHERE workspace_id = %s", [ws])
        assert await rollup_rows(conn, ws) != good

        args = argparse.Namespace(workspace=tenant.slug, from_=None, to=None)
        assert await asyncio.to_thread(rebuild_command, args, settings) == 0
        assert "rebuilt" in capsys.readouterr().out
        assert await rollup_rows(conn, ws) == good
        assert await day_rollups_mismatch(conn, ws) == []

        # A window given as dates rebuilds just those days, the same way.
        d = days_ago_midnight(2)
        await conn.execute("DELETE FROM gpu_hour_rollups WHERE workspace_id = %s", [ws])
        args = argparse.Namespace(
            workspace=tenant.slug,
            from_=(d - timedelta(days=1)).date().isoformat(),
            to=(d + timedelta(days=1)).date().isoformat(),
        )
        assert await asyncio.to_thread(rebuild_command, args, settings) == 0
        assert await rollup_rows(conn, ws) == good


async def test_command_refuses_bad_input(app, client, settings, capsys) -> None:
    tenant, _ = await _series(app, client)
    unknown = argparse.Namespace(workspace="nope", from_=None, to=None)
    assert await asyncio.to_thread(rebuild_command, unknown, settings) == 2
    assert "no workspace" in capsys.readouterr().err
    half = argparse.Namespace(workspace=tenant.slug, from_="2026-11-01T10:30:00Z", to=None)
    assert await asyncio.to_thread(rebuild_command, half, settings) == 2
    assert "whole hour" in capsys.readouterr().err
    empty = await quick_tenant(app)
    nothing = argparse.Namespace(workspace=empty.slug, from_=None, to=None)
    assert await asyncio.to_thread(rebuild_command, nothing, settings) == 0
    assert "nothing rebuilt" in capsys.readouterr().out


async def test_rebuild_of_any_sub_window_changes_nothing(app, client) -> None:
    tenant, _ = await _series(app, client)
    d = days_ago_midnight(2)
    async with await psycopg.AsyncConnection.connect(_url(app)) as conn:
        ws = await workspace_id(conn, tenant.slug)
        good = await rollup_rows(conn, ws)
        for start in range(-2, 3):
            for length in (1, 2):
                lo = d + timedelta(hours=start)
                async with conn.transaction():
                    await rebuild(conn, ws, lo, lo + timedelta(hours=length))
                assert await rollup_rows(conn, ws) == good, (start, length)


async def test_ingest_waits_for_a_running_rebuild(app, client) -> None:
    """A rebuild holds the hosts' locks; a push in the meantime waits, then lands exactly."""
    tenant = await quick_tenant(app)
    await set_max_gap(client, tenant, 600)
    host = await enroll(client, tenant)
    d = days_ago_midnight(2)
    held = [gpu(0, util=90, state="active", procs=[proc("gina")])]
    for minutes in (0, 5, 10):
        body = observation(d + timedelta(minutes=minutes), held)
        assert (await push(client, host["agentToken"], body)).status_code == 202

    async with await psycopg.AsyncConnection.connect(_url(app)) as conn:
        ws = await workspace_id(conn, tenant.slug)
        await conn.commit()
        async with conn.transaction():
            await rebuild(conn, ws, d - timedelta(hours=1), d + timedelta(hours=2))
            late = asyncio.create_task(
                push(client, host["agentToken"], observation(d + timedelta(minutes=7), held))
            )
            await asyncio.sleep(0.5)
            assert not late.done()  # blocked on the host row the rebuild locked
        assert (await late).status_code == 202
        incremental = await rollup_rows(conn, ws)
        async with conn.transaction():
            await rebuild(conn, ws, d - timedelta(hours=1), d + timedelta(hours=2))
        assert await rollup_rows(conn, ws) == incremental
        assert await day_rollups_mismatch(conn, ws) == []
