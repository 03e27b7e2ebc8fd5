"""The daily digest: yesterday's waste by person, unhealthy hosts, the longest idle-held
GPUs now; per workspace, once per local day, at the hour it chose (`digestHour`).

The figures are the reports' own (board.reports.service.usage_report grouped by user,
board.reservations.report.build grouped by member) for yesterday in the workspace's
zone, so the digest and the reports cannot disagree. It goes to the workspace's admins
by mail, and to every channel that listens to `digest.daily`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.notices.budget_watch import teams_at_risk
from board.notices.detect import Seen, WorkspaceRow
from board.notices.events import enqueue, iso
from board.reportkit.params import local_day_hour, parse_window
from board.reports.idle_energy import idle_held_energy
from board.reports.service import usage_report
from board.reservations.report import build as reservation_report

LONGEST_SHOWN = 10


@dataclass(frozen=True)
class DigestDay:
    """The local day the digest is sent on, and the day it tells about."""

    today: date
    yesterday: date


def due(ws: WorkspaceRow, now: datetime) -> DigestDay | None:
    if ws.digest_hour is None:
        return None
    local = now.astimezone(ZoneInfo(ws.timezone))
    if local.hour < ws.digest_hour:
        return None
    return DigestDay(local.date(), local.date() - timedelta(days=1))


async def figures(session: AsyncSession, ws: WorkspaceRow, day: date) -> dict[str, Any]:
    """Idle-held GPU-hours per Linux user and reserved-but-idle GPU-hours per member."""
    # The day's first and next day's first hour, as the reports count local days.
    start, end = (
        local_day_hour(day, ws.timezone),
        local_day_hour(day + timedelta(days=1), ws.timezone),
    )
    window = parse_window(start, end, ws.timezone)
    conn = await report_connection(session)
    usage = await usage_report(conn, ws.id, window, ("user",))
    booked = await reservation_report(conn, ws.id, start, end, "member", ws.timezone, "json")
    burned = await idle_held_energy(conn, ws.id, window)
    return {
        "day": day.isoformat(),
        "idleHeldByUser": [
            {"user": row["user"], "idleHeldGpuHours": row["idleHeldGpuHours"]}
            for row in usage.rows
            if row["idleHeldGpuHours"] > 0
        ],
        "idleHeldGpuHours": usage.totals.idle_held_gpu_hours,
        "reservedIdleByMember": [
            {
                "memberEmail": row["memberEmail"],
                "reservedIdleGpuHours": row["reservedIdleGpuHours"],
            }
            for row in booked.rows
            if row["reservedIdleGpuHours"] > 0
        ],
        "reservedIdleGpuHours": booked.totals["reservedIdleGpuHours"],
        "idleHeldEnergy": burned.model_dump(),
    }


async def send_if_due(
    session: AsyncSession,
    ws: WorkspaceRow,
    seen: Seen,
    now: datetime,
    *,
    mail: bool,
) -> bool:
    """Queue today's digest unless it was already queued (the day is its key)."""
    day = due(ws, now)
    if day is None:
        return False
    taken = await session.scalar(
        text(
            "INSERT INTO notice_digests (workspace_id, day, event_id) "
            "VALUES (:ws, :day, gen_random_uuid()) ON CONFLICT DO NOTHING RETURNING day"
        ),
        {"ws": ws.id, "day": day.today},
    )
    if taken is None:
        return False
    data = await figures(session, ws, day.yesterday)
    unhealthy = [
        {**c.data["host"], "freshness": c.kind.removeprefix("host."), "since": iso(c.since)}
        for c in seen.conditions.values()
        if c.kind in ("host.stale", "host.error")
    ]
    idle = sorted(
        (c for c in seen.conditions.values() if c.kind == "gpu.idle_held"), key=lambda c: c.since
    )
    data |= {
        "workspace": {"slug": ws.slug, "name": ws.name},
        "unhealthyHosts": unhealthy,
        "maintenance": seen.maintenance,
        "longestIdleHeld": [
            {
                "host": c.data["host"],
                "gpu": c.data["gpu"],
                "linuxUsers": c.data["linuxUsers"],
                "since": iso(c.since),
                "idleHeldMinutes": int((now - c.since).total_seconds() // 60),
                "url": c.data.get("url"),
            }
            for c in idle[:LONGEST_SHOWN]
        ],
        "teamsAtRisk": await teams_at_risk(session, ws, now),
    }
    admins = (
        (
            await session.execute(
                text(
                    "SELECT u.email FROM memberships m JOIN users u ON u.id = m.user_id "
                    "WHERE m.workspace_id = :ws AND m.role = 'admin' ORDER BY u.email"
                ),
                {"ws": ws.id},
            )
        )
        .scalars()
        .all()
    )
    event_id = await enqueue(
        session, ws.id, "digest.daily", data, now, people=list(admins) if mail else []
    )
    await session.execute(
        text("UPDATE notice_digests SET event_id = :e WHERE workspace_id = :ws AND day = :day"),
        {"e": event_id, "ws": ws.id, "day": day.today},
    )
    return True
