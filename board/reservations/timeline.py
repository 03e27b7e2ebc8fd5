"""The reservation timeline the pages draw: GPUs as rows, bookings as bars on a window.

Positions are fractions of the window (0..1), so a page lays them out at any width
without script. The window is the past day and the next 7 days unless asked otherwise.
"""

from __future__ import annotations

import uuid
import zoneinfo
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.reservations.queries import list_reservations
from board.reservations.schemas import ReservationOut

PAST = timedelta(days=1)
AHEAD = timedelta(days=7)
MAX_ROWS = 400  # a page of GPUs; a lab picks a host to see others


@dataclass(frozen=True)
class BookableGpu:
    host_id: str  # public id
    host_name: str
    uuid: str
    index: int
    name: str


@dataclass(frozen=True)
class Bar:
    booking: ReservationOut
    left: float  # fraction of the window before the bar
    width: float

    @property
    def label(self) -> str:
        return f"{self.booking.member_email}" + (
            f" — {self.booking.note}" if self.booking.note else ""
        )


@dataclass
class Row:
    gpu: BookableGpu
    bars: list[Bar] = field(default_factory=list)


@dataclass(frozen=True)
class Mark:
    left: float
    label: str


@dataclass(frozen=True)
class Timeline:
    start: datetime
    end: datetime
    now: float  # where now falls, as a fraction of the window
    rows: list[Row]
    days: list[Mark]  # each local midnight in the window
    truncated: bool
    zone: tzinfo

    def local(self, moment: datetime) -> str:
        """A time as the page shows it (and its time inputs take it), with the weekday."""
        return moment.astimezone(self.zone).strftime("%a %Y-%m-%d %H:%M")


def window(now: datetime) -> tuple[datetime, datetime]:
    """The past day and the next 7, on whole hours."""
    hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return hour - PAST, hour + timedelta(hours=1) + AHEAD


_GPUS = """
    SELECT h.public_id, h.display_name, g.uuid, g.gpu_index, g.name
    FROM hosts h
    JOIN gpus g ON g.workspace_id = h.workspace_id AND g.host_id = h.id
    WHERE h.workspace_id = %s AND h.revoked_at IS NULL
    ORDER BY h.display_name, h.id, g.gpu_index, g.uuid
"""


async def bookable_gpus(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> list[BookableGpu]:
    """Every GPU of the workspace's hosts that are not revoked, by host name and index."""
    cur = await conn.execute(_GPUS, [workspace_id])
    return [
        BookableGpu(str(public), name, str(gpu_uuid), int(index), gpu_name)
        for public, name, gpu_uuid, index, gpu_name in await cur.fetchall()
    ]


def is_host_id(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def build(
    gpus: list[BookableGpu],
    bookings: list[ReservationOut],
    start: datetime,
    end: datetime,
    now: datetime,
    zone: tzinfo,
    host: str | None = None,
) -> Timeline:
    """Rows for `host`'s GPUs, or else for the GPUs of every host booked in the window."""
    span = (end - start).total_seconds()

    def at(moment: datetime) -> float:
        return min(1.0, max(0.0, (moment - start).total_seconds() / span))

    booked_hosts = {b.host_id for b in bookings}
    shown = [g for g in gpus if (g.host_id == host if host else g.host_id in booked_hosts)]
    rows = {(g.host_id, g.uuid): Row(g) for g in shown[:MAX_ROWS]}
    for booking in bookings:
        left, right = at(booking.start), at(booking.end)
        if right <= left:
            continue
        for gpu_uuid in booking.gpu_uuids:
            row = rows.get((booking.host_id, gpu_uuid))
            if row is not None:
                row.bars.append(Bar(booking, left, right - left))
    days: list[Mark] = []
    local = start.astimezone(zone)
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    for offset in range(1, 11):
        mark = (midnight + timedelta(days=offset)).replace(tzinfo=None)
        moment = mark.replace(tzinfo=zone)  # a local midnight (DST-safe: naive, then zone)
        if moment >= end:
            break
        days.append(Mark(at(moment), mark.strftime("%a %d")))
    return Timeline(start, end, at(now), list(rows.values()), days, len(shown) > MAX_ROWS, zone)


def zone_of(name: str) -> tzinfo:
    """The workspace's time zone (UTC if the name is unknown here)."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return UTC


async def host_timeline(
    session: AsyncSession, workspace_id: int, zone_name: str, host_id: str
) -> Timeline:
    """One host's GPUs on the timeline (the host page), in the workspace's time zone."""
    now = datetime.now(UTC)
    start, end = window(now)
    gpus = await bookable_gpus(await report_connection(session), workspace_id)
    booked = await list_reservations(session, workspace_id, start, end, host_id)
    return build(gpus, booked, start, end, now, zone_of(zone_name), host_id)
