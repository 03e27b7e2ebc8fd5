"""Reading bookings: one by id, or those overlapping a window (the API's list, the pages)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.errors import NotFound
from board.reservations.crediting import Booking
from board.reservations.schemas import ReservationOut
from board.rollups.crediting import to_us

_SELECT = """
    SELECT r.id, r.public_id, h.public_id, u.email, r.linux_users, lower(r.during),
           upper(r.during), r.note, r.user_id, r.host_id,
           ARRAY(SELECT g.uuid FROM reservation_gpus rg
                 JOIN gpus g ON g.workspace_id = rg.workspace_id AND g.id = rg.gpu_id
                 WHERE rg.workspace_id = r.workspace_id AND rg.reservation_id = r.id
                 ORDER BY g.gpu_index, g.uuid),
           ARRAY(SELECT rg.gpu_id FROM reservation_gpus rg
                 WHERE rg.workspace_id = r.workspace_id AND rg.reservation_id = r.id
                 ORDER BY rg.gpu_id)
    FROM reservations r
    JOIN hosts h ON h.workspace_id = r.workspace_id AND h.id = r.host_id
    JOIN users u ON u.id = r.user_id
    WHERE r.workspace_id = %(ws)s
"""


@dataclass(frozen=True)
class StoredReservation:
    id: int
    host_id: int
    user_id: int
    gpu_ids: list[int]
    shown: ReservationOut

    @property
    def start(self) -> datetime:
        return self.shown.start

    @property
    def end(self) -> datetime:
        return self.shown.end

    def bookings(self, workspace_id: int, start: datetime, end: datetime) -> list[Booking]:
        users = frozenset(self.shown.linux_users)
        return [
            Booking(workspace_id, self.id, gpu, to_us(start), to_us(end), users)
            for gpu in self.gpu_ids
        ]


def _stored(row: tuple[Any, ...]) -> StoredReservation:
    rid, public, host, email, users, start, end, note, user_id, host_id, uuids, gpu_ids = row
    return StoredReservation(
        id=rid,
        host_id=host_id,
        user_id=user_id,
        gpu_ids=list(gpu_ids),
        shown=ReservationOut(
            reservation_id=str(public),
            host_id=str(host),
            gpu_uuids=list(uuids),
            member_email=email,
            linux_users=list(users),
            start=start.astimezone(UTC),
            end=end.astimezone(UTC),
            note=note,
        ),
    )


async def get(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, public: str
) -> StoredReservation:
    try:
        public_id = uuid.UUID(public)
    except ValueError:
        raise NotFound("No such reservation in this workspace.") from None
    cur = await conn.execute(
        _SELECT + " AND r.public_id = %(id)s", {"ws": workspace_id, "id": public_id}
    )
    row = await cur.fetchone()
    if row is None:
        raise NotFound("No such reservation in this workspace.")
    return _stored(row)


async def get_by_id(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, rid: int
) -> StoredReservation:
    cur = await conn.execute(_SELECT + " AND r.id = %(id)s", {"ws": workspace_id, "id": rid})
    row = await cur.fetchone()
    assert row is not None
    return _stored(row)


async def list_reservations(
    session: AsyncSession,
    workspace_id: int,
    start: datetime,
    end: datetime | None,
    host: str | None = None,
    member_email: str | None = None,
    limit: int = 2000,
) -> list[ReservationOut]:
    """Bookings overlapping [start, end), by start; optionally of one host or member."""
    conn = await report_connection(session)
    # upper(during) > lo, implied by the overlap, lets ix_reservations_workspace_end
    # skip the bookings that ended before the window (a year of them, on a busy lab).
    sql = _SELECT + " AND upper(r.during) > %(lo)s AND r.during && tstzrange(%(lo)s, %(hi)s)"
    params: dict[str, Any] = {"ws": workspace_id, "lo": start, "hi": end}
    if host is not None:
        try:
            params["host"] = uuid.UUID(host)
        except ValueError:
            return []
        sql += " AND h.public_id = %(host)s"
    if member_email is not None:
        params["email"] = member_email.strip().lower()
        sql += " AND u.email = %(email)s"
    sql += " ORDER BY lower(r.during), r.id LIMIT %(limit)s"
    params["limit"] = limit
    cur = await conn.execute(sql, params)
    return [_stored(row).shown for row in await cur.fetchall()]
