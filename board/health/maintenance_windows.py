"""Hosts' maintenance windows: made, listed and removed by admins; read by the notices,
the fleet page, the digest and capacity (board.health.windows computes occurrences)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from board.auth.deps import WorkspaceContext
from board.errors import Conflict, NotFound, Unprocessable
from board.health.models import MaintenanceWindow
from board.health.schemas import WindowIn, WindowOut
from board.health.windows import PERIODS, WindowRule, next_occurrence
from board.hosts.models import Host
from board.hosts.service import get_host_row
from board.zones import iana_zone

MAX_WINDOWS_PER_HOST = 50
# A one-off window is at most this long; a recurring one at most its period.
MAX_ONE_OFF = timedelta(days=366)
# The first key of the two-key advisory lock a host's window count is taken under.
WINDOWS_LOCK = 0x6D6E7477  # "mntw"
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)

_RULES = text(
    """
    SELECT host_id, public_id, starts_at, ends_at, recurrence, zone, until, note
    FROM host_maintenance_windows WHERE workspace_id = :ws
    ORDER BY host_id, starts_at, id
    """
)


def rule_of(row: MaintenanceWindow) -> WindowRule:
    return WindowRule(
        host_id=row.host_id,
        public_id=str(row.public_id),
        starts_at=row.starts_at,
        ends_at=row.ends_at,
        recurrence=row.recurrence,
        zone=row.zone,
        until=row.until,
        note=row.note,
    )


async def window_rules(session: AsyncSession, workspace_id: int) -> list[WindowRule]:
    """Every window of the workspace's hosts (a handful per host at most)."""
    rows = (await session.execute(_RULES, {"ws": workspace_id})).all()
    return [
        WindowRule(host, str(public), start, end, recurrence, zone, until, note)
        for host, public, start, end, recurrence, zone, until, note in rows
    ]


def _aware(label: str, moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise Unprocessable(f"{label} {moment.isoformat()} has no UTC offset; add one (e.g. Z).")
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:
        raise Unprocessable(f"{label} {moment.isoformat()} is out of range.") from None
    if not EARLIEST <= moment < LATEST:
        raise Unprocessable(f"{label} must be between 1970 and 9000.")
    return moment


def _checked(body: WindowIn, zone: str) -> tuple[datetime, datetime, datetime | None]:
    start, end = _aware("start", body.start), _aware("end", body.end)
    until = _aware("until", body.until) if body.until is not None else None
    if end <= start:
        raise Unprocessable(f"end ({end.isoformat()}) must be after start ({start.isoformat()}).")
    if body.recurrence == "none":
        if until is not None:
            raise Unprocessable("until goes with a recurring window (daily or weekly).")
        if end - start > MAX_ONE_OFF:
            raise Unprocessable("A one-off maintenance window is at most 366 days long.")
        return start, end, until
    # The local times repeat: the window must fit in its period there.
    local = iana_zone(zone)
    wall_start = start.astimezone(local).replace(tzinfo=None)
    wall_end = end.astimezone(local).replace(tzinfo=None)
    # Across the autumn change 02:30 CEST to 02:10 CET is 40 real minutes but ends
    # before it starts on the wall: repeated at those wall times it would never run.
    if wall_end <= wall_start:
        raise Unprocessable(
            f"A {body.recurrence} window repeats its local times in {zone}, and there its end "
            f"({wall_end:%H:%M}) is not after its start ({wall_start:%H:%M}): the clocks go "
            "back in between. Give the local times it should keep."
        )
    if wall_end - wall_start >= PERIODS[body.recurrence]:
        period = "a day" if body.recurrence == "daily" else "a week"
        raise Unprocessable(f"A {body.recurrence} window must be shorter than {period}.")
    if until is not None and until <= start:
        raise Unprocessable("until must be after start.")
    return start, end, until


def window_view(row: MaintenanceWindow, host_public: str, now: datetime) -> WindowOut:
    upcoming = next_occurrence(rule_of(row), now)
    return WindowOut(
        window_id=str(row.public_id),
        host_id=host_public,
        start=row.starts_at,
        end=row.ends_at,
        recurrence=row.recurrence,
        zone=row.zone,
        until=row.until,
        note=row.note,
        next_start=upcoming.start if upcoming else None,
        next_end=upcoming.end if upcoming else None,
        in_force=upcoming is not None and upcoming.start <= now < upcoming.end,
    )


async def add_window(
    session: AsyncSession, ctx: WorkspaceContext, host: Host, body: WindowIn
) -> WindowOut:
    """A window on `host` (the caller looked it up in ctx's workspace)."""
    zone = ctx.workspace.timezone
    start, end, until = _checked(body, zone)
    # Two admins adding at once count one after the other (held until the commit).
    await session.execute(
        text("SELECT pg_advisory_xact_lock(:key, :host)"),
        {"key": WINDOWS_LOCK, "host": host.id & 0x7FFFFFFF},
    )
    count = await session.scalar(
        select(func.count())
        .select_from(MaintenanceWindow)
        .where(
            MaintenanceWindow.workspace_id == ctx.workspace_id,
            MaintenanceWindow.host_id == host.id,
        )
    )
    if (count or 0) >= MAX_WINDOWS_PER_HOST:
        raise Conflict(
            f"A host has at most {MAX_WINDOWS_PER_HOST} maintenance windows; remove one first."
        )
    row = MaintenanceWindow(
        workspace_id=ctx.workspace_id,
        public_id=uuid.uuid4(),
        host_id=host.id,
        starts_at=start,
        ends_at=end,
        recurrence=body.recurrence,
        zone=zone,
        until=until,
        note=body.note or "",
        created_by=ctx.user_id,
    )
    session.add(row)
    await session.flush()
    return window_view(row, str(host.public_id), datetime.now(UTC))


async def list_windows(
    session: AsyncSession, ctx: WorkspaceContext, host_id: str
) -> list[WindowOut]:
    host = await get_host_row(session, ctx.workspace_id, host_id)
    rows = await session.scalars(
        select(MaintenanceWindow)
        .where(
            MaintenanceWindow.workspace_id == ctx.workspace_id,
            MaintenanceWindow.host_id == host.id,
        )
        .order_by(MaintenanceWindow.starts_at, MaintenanceWindow.id)
    )
    now = datetime.now(UTC)
    return [window_view(row, str(host.public_id), now) for row in rows]


async def remove_window(
    session: AsyncSession, ctx: WorkspaceContext, host_id: str, window_id: str
) -> WindowOut:
    host = await get_host_row(session, ctx.workspace_id, host_id)
    try:
        public = uuid.UUID(window_id)
    except ValueError:
        raise NotFound("No such maintenance window on this host.") from None
    row = await session.scalar(
        select(MaintenanceWindow).where(
            MaintenanceWindow.workspace_id == ctx.workspace_id,
            MaintenanceWindow.host_id == host.id,
            MaintenanceWindow.public_id == public,
        )
    )
    if row is None:
        raise NotFound("No such maintenance window on this host.")
    shown = window_view(row, str(host.public_id), datetime.now(UTC))
    await session.delete(row)
    await session.flush()
    return shown
