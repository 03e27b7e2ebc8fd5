"""A report's own database connection, and the per-workspace bound on running reports.

A report streams for as long as the client reads, so it gets a connection of its own
(not one of the process pool's few, which ingest needs) and holds one of a workspace's
REPORT_SLOTS while it runs. A slot is a session-level PostgreSQL advisory lock on that
connection: it bounds reports across every worker and replica sharing the database, and
it is released when the connection closes, however the request ends (done, failed, the
client gone, the worker killed). With every slot taken the answer is a 429 with
Retry-After, before any work is done.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from fastapi import HTTPException
from starlette.requests import HTTPConnection

from board.db.urls import libpq_url

REPORT_SLOTS = 3
RETRY_AFTER_SECONDS = 10
# The first key of the two-key advisory locks (slot number added); the second is the
# workspace. Two-key locks never collide with the board's single-bigint locks.
SLOT_LOCK_BASE = 0x67755200
# How a report's connection shows in pg_stat_activity.
APPLICATION_NAME = "gua-board report"


def slot_key(slot: int, workspace_id: int) -> tuple[int, int]:
    """The advisory lock (both int4) of one of a workspace's report slots."""
    return SLOT_LOCK_BASE + slot, workspace_id & 0x7FFFFFFF


# Report requests of each workspace connecting and seeking a slot in this process. The
# advisory locks bound running reports across processes, but only once connected: with
# this checked first, a flood of one workspace's report requests is refused without
# opening a backend each (past PostgreSQL's max_connections, every workspace's pages and
# pushes would fail). A request holding a slot holds its lock, so a process has at most
# twice REPORT_SLOTS report connections of a workspace at any moment.
_seeking: dict[int, int] = {}


def _busy() -> HTTPException:
    return HTTPException(
        status_code=429,
        detail=(
            f"This workspace already has {REPORT_SLOTS} reports running, the most it may "
            f"run at once; try again in {RETRY_AFTER_SECONDS} seconds."
        ),
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


async def take_report_connection(
    connection: HTTPConnection, workspace_id: int
) -> psycopg.AsyncConnection[Any]:
    """A new read-only connection holding one of the workspace's report slots; a 429
    when all are taken. The caller closes it (that frees the slot)."""
    if _seeking.get(workspace_id, 0) >= REPORT_SLOTS:
        raise _busy()  # before any connection: a refused request costs no backend
    _seeking[workspace_id] = _seeking.get(workspace_id, 0) + 1
    try:
        conn = await _connect_with_slot(connection, workspace_id)
    finally:
        left = _seeking[workspace_id] - 1
        if left:
            _seeking[workspace_id] = left
        else:
            del _seeking[workspace_id]
    if conn is None:
        raise _busy()
    return conn


async def _connect_with_slot(
    connection: HTTPConnection, workspace_id: int
) -> psycopg.AsyncConnection[Any] | None:
    url = libpq_url(connection.app.state.runtime.database_url)
    conn = await psycopg.AsyncConnection.connect(url, application_name=APPLICATION_NAME)
    try:
        # One snapshot for the whole report: its rows, totals and coverage agree.
        await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        await conn.set_read_only(True)
        for slot in range(REPORT_SLOTS):
            cur = await conn.execute(
                "SELECT pg_try_advisory_lock(%s, %s)", list(slot_key(slot, workspace_id))
            )
            row = await cur.fetchone()
            if row is not None and row[0]:
                return conn
    except BaseException:
        await conn.close()
        raise
    await conn.close()
    return None


@asynccontextmanager
async def report_slot(
    connection: HTTPConnection, workspace_id: int
) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """take_report_connection for a report built whole before it is sent (the
    reservations report, the team statements): the slot is held while the block runs."""
    conn = await take_report_connection(connection, workspace_id)
    try:
        yield conn
    finally:
        await conn.close()


def keeper_connect(
    connection: HTTPConnection,
) -> Callable[[], Awaitable[psycopg.AsyncConnection[Any]]]:
    """A factory of the autocommit connection a report writes its kept bodies on
    (board.reports.bodies.Keeper): opened only when a report has blocks to keep."""
    url = libpq_url(connection.app.state.runtime.database_url)

    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            url, autocommit=True, application_name=APPLICATION_NAME
        )

    return connect
