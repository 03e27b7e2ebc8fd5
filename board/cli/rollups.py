"""`gua-board rollups rebuild --workspace SLUG [--from FROM] [--to TO]`.

The window is read like a report's (a date or a time on a whole UTC hour, in UTC) and
defaults to everything the raw samples can still rebuild; board.rollups.rebuild does
the work.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import zoneinfo
from datetime import datetime, timedelta
from typing import Any

import psycopg

from board.auth import routing
from board.db.urls import libpq_url, resolve_database_url
from board.errors import DomainError
from board.reportkit.params import parse_bound
from board.reservations.rebuild import FigureRebuild, rebuild_hours
from board.rollups.rebuild import HOUR, RebuildResult, span_of
from board.settings import Settings

_UTC = zoneinfo.ZoneInfo("UTC")


def rebuild_command(args: argparse.Namespace, settings: Settings) -> int:
    """The exit status: 0 done (or nothing to do), 2 an unknown workspace or a bad window."""
    url = libpq_url(resolve_database_url(settings))
    return asyncio.run(_rebuild(args, url))


async def _rebuild(args: argparse.Namespace, url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        # A slug is routed to its workspace (board.auth.routing), as every lookup by it is.
        workspace_id = await routing.workspace_of(
            conn, routing.WORKSPACE_SLUG, args.workspace.encode()
        )
        if workspace_id is None:
            sys.stderr.write(f"gua-board: no workspace {args.workspace!r}\n")
            return 2
        span = await span_of(conn, workspace_id)
        if span is None:
            sys.stdout.write(f"workspace {args.workspace} has no raw samples; nothing rebuilt\n")
            return 0
        try:
            start = parse_bound("--from", args.from_, "UTC", _UTC) if args.from_ else span.oldest
            end = parse_bound("--to", args.to, "UTC", _UTC) if args.to else span.newest + HOUR
        except DomainError as exc:
            sys.stderr.write(f"gua-board: {exc.detail}\n")
            return 2
        if start < span.oldest:
            sys.stdout.write(
                f"raw samples are kept from {span.oldest.isoformat()}; rebuilding from there "
                "and keeping the older rollups\n"
            )
            start = span.oldest
        if end <= start:
            sys.stdout.write("nothing to rebuild in that window\n")
            return 0
        total, figures = await _rebuild_days(conn, span.workspace_id, start, end)
        sys.stdout.write(
            f"rebuilt {args.workspace} from {start.isoformat()} to {end.isoformat()}: "
            f"{total.observations} observations on {total.hosts} hosts, "
            f"{total.gpu_rows} GPU-hour and {total.user_rows} user-hour rows, "
            f"{figures.rows} reservation-hour rows and {figures.booked_hours} booked GPU hours, "
            f"{figures.job_rows} job-hour rows and {figures.job_ride_hours} GPU hours of jobs, "
            f"{figures.outside_rows} outside-job hour rows\n"
        )
        return 0


async def _rebuild_days(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, start: datetime, end: datetime
) -> tuple[RebuildResult, FigureRebuild]:
    """The rollups and then the reservation figures of [start, end), one UTC day per
    transaction (a transaction holds the host locks for seconds, not the whole replay).

    Both in one transaction: the rollups' rebuild re-inserts the GPU-hour rows, whose
    booked sums (a booking's whole hours) only the figures' rebuild writes again, so
    nobody ever reads a day between the two.
    """
    total, figures = RebuildResult(), FigureRebuild()
    day = start
    while day < end:
        stop = min(day.replace(hour=0) + timedelta(days=1), end)
        async with conn.transaction():
            rollups, booked = await rebuild_hours(conn, workspace_id, day, stop)
            total.add(rollups)
            figures.add(booked)
        day = stop
    return total, figures
