"""Booking, moving and cancelling GPUs; who may, and what the figures learn of it.

Every change locks the host row first (board.db.locks, the order the ingest path uses),
so a booking change and an ingest batch of the same host never interleave: the batch
sees the booking, or the change re-credits what the batch stored. The exclusion
constraint on reservation_gpus is what keeps two bookings of one GPU apart; the check
before it only finds the other booking's name for the 409.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from board.audit.service import record
from board.auth.deps import WorkspaceContext
from board.db.connection import report_connection
from board.db.locks import lock_hosts
from board.errors import Conflict, Forbidden, NotFound, Unprocessable
from board.reservations import rules
from board.reservations.crediting import Booking, ReservationDelta
from board.reservations.schemas import ReservationIn, ReservationOut, ReservationPatch
from board.reservations.store import host_ticks, upsert_figures
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


def _now(now: datetime | None) -> datetime:
    return now if now is not None else datetime.now(UTC)


async def _lock_host(conn: psycopg.AsyncConnection[Any], workspace_id: int, host_id: int) -> int:
    """Lock the host (as the ingest path does); its workspace's maxSampleGap in µs."""
    rows = await lock_hosts(
        conn,
        "w.max_sample_gap_seconds",
        "h.workspace_id = %s AND h.id = %s",
        [workspace_id, host_id],
    )
    if not rows:
        raise NotFound("No such host in this workspace.")
    return int(rows[0][0]) * 1_000_000


async def recredit(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    host_id: int,
    max_gap_us: int,
    changes: list[tuple[Booking, int]],
    span: tuple[datetime, datetime],
) -> None:
    """Credit the difference a booking change makes to intervals stored already.

    `changes`: the old range un-credited (-1), the new one credited (+1); `span` covers
    where they differ. Intervals outside it count the same under both and cancel out;
    reading max gap around it finds every interval that reaches into it.
    """
    gap = timedelta(microseconds=max_gap_us)
    ticks = await host_ticks(conn, workspace_id, host_id, span[0] - gap, span[1] + gap)
    if len(ticks) < 2:
        return
    delta = ReservationDelta()
    for booking, sign in changes:
        delta.add_booking(booking, sign)
    delta.credit_series(ticks, max_gap_us)
    await upsert_figures(conn, delta)


async def _member(
    conn: psycopg.AsyncConnection[Any], ctx: WorkspaceContext, email: str | None
) -> tuple[int, str]:
    """The reserver: the caller, or (admins only) another member of the workspace."""
    if email is None or email.strip().lower() == ctx.email:
        return ctx.user_id, ctx.email
    if ctx.role != "admin":
        raise Forbidden("Only an admin may book for another member.")
    cur = await conn.execute(
        "SELECT u.id, u.email FROM memberships m JOIN users u ON u.id = m.user_id "
        "WHERE m.workspace_id = %s AND u.email = %s",
        [ctx.workspace_id, email.strip().lower()],
    )
    row = await cur.fetchone()
    if row is None:
        raise Unprocessable(f"{email!r} is not a member of this workspace.")
    return int(row[0]), str(row[1])


async def _host(conn: psycopg.AsyncConnection[Any], workspace_id: int, host: str) -> int:
    try:
        public_id = uuid.UUID(host)
    except ValueError:
        raise Unprocessable(f"hostId {host!r} is not a host of this workspace.") from None
    cur = await conn.execute(
        "SELECT id, revoked_at IS NOT NULL FROM hosts WHERE workspace_id = %s AND public_id = %s",
        [workspace_id, public_id],
    )
    row = await cur.fetchone()
    if row is None:
        raise Unprocessable(f"hostId {host!r} is not a host of this workspace.")
    if row[1]:
        raise Unprocessable("That host is revoked; it cannot be booked.")
    return int(row[0])


async def _gpus(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, host_id: int, wanted: list[str] | None
) -> list[int]:
    cur = await conn.execute(
        "SELECT uuid, id FROM gpus WHERE workspace_id = %s AND host_id = %s "
        "ORDER BY gpu_index, uuid",
        [workspace_id, host_id],
    )
    known = {str(u): int(i) for u, i in await cur.fetchall()}
    if wanted is None:
        if not known:
            raise Unprocessable("This host has reported no GPUs yet; there is nothing to book.")
        return sorted(known.values())
    if len(set(wanted)) != len(wanted):
        raise Unprocessable("gpuUuids names a GPU twice.")
    unknown = [u for u in wanted if u not in known]
    if unknown:
        raise Unprocessable(f"GPU {unknown[0]!r} is not a GPU of this host.")
    return sorted(known[u] for u in wanted)


async def _linked_users(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, user_id: int
) -> list[str]:
    cur = await conn.execute(
        "SELECT linux_user FROM directory_entries WHERE workspace_id = %s AND user_id = %s "
        "ORDER BY linux_user",
        [workspace_id, user_id],
    )
    return [str(r[0]) for r in await cur.fetchall()]


async def _refuse_overlap(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    gpu_ids: list[int],
    start: datetime,
    end: datetime,
    other_than: int | None = None,
) -> None:
    """409 naming the booking in the way (the host is locked: nothing can slip in)."""
    cur = await conn.execute(
        """
        SELECT r.public_id, u.email, lower(r.during), upper(r.during)
        FROM reservation_gpus rg
        JOIN reservations r ON r.workspace_id = rg.workspace_id AND r.id = rg.reservation_id
        JOIN users u ON u.id = r.user_id
        WHERE rg.workspace_id = %s AND rg.gpu_id = ANY(%s) AND rg.during && tstzrange(%s, %s)
          AND r.id IS DISTINCT FROM %s
        ORDER BY lower(r.during) LIMIT 1
        """,
        [workspace_id, gpu_ids, start, end, other_than],
    )
    row = await cur.fetchone()
    if row is not None:
        public, email, lo, hi = row
        raise Conflict(
            f"Those GPUs are already booked by {email} from {lo.astimezone(UTC).isoformat()} "
            f"to {hi.astimezone(UTC).isoformat()} (reservation {public}).",
            reservationId=str(public),
        )


async def _write_gpus(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    stored_id: int,
    host_id: int,
    gpu_ids: list[int],
    start: datetime,
    end: datetime,
) -> None:
    try:
        async with conn.transaction():  # a savepoint: a lost race becomes a 409, not a 500
            await conn.execute(
                "INSERT INTO reservation_gpus (workspace_id, reservation_id, gpu_id, host_id, "
                "during) SELECT %s, %s, g, %s, tstzrange(%s, %s) FROM unnest(%s::bigint[]) g",
                [workspace_id, stored_id, host_id, start, end, gpu_ids],
            )
    except psycopg.errors.ExclusionViolation:
        raise Conflict("Those GPUs are already booked for part of that time.") from None


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


async def create(
    session: AsyncSession, ctx: WorkspaceContext, body: ReservationIn, now: datetime | None = None
) -> ReservationOut:
    now = _now(now)
    conn = await report_connection(session)
    ws = ctx.workspace_id
    start = rules.whole_minute("start", body.start).astimezone(UTC)
    end = rules.whole_minute("end", body.end).astimezone(UTC)
    host_id = await _host(conn, ws, body.host_id)
    user_id, email = await _member(conn, ctx, body.member_email)
    rules.check_range(start, end, ctx.workspace.max_reservation_days, now)
    gpu_ids = await _gpus(conn, ws, host_id, body.gpu_uuids)
    linux_users = (
        sorted(set(body.linux_users))
        if body.linux_users is not None
        else await _linked_users(conn, ws, user_id)
    )
    max_gap_us = await _lock_host(conn, ws, host_id)
    await _refuse_overlap(conn, ws, gpu_ids, start, end)
    cur = await conn.execute(
        "INSERT INTO reservations (workspace_id, public_id, host_id, user_id, linux_users, "
        "during, note, created_by) VALUES (%s, %s, %s, %s, %s, tstzrange(%s, %s), %s, %s) "
        "RETURNING id",
        [ws, uuid.uuid4(), host_id, user_id, linux_users, start, end, body.note or "", ctx.user_id],
    )
    row = await cur.fetchone()
    assert row is not None
    stored_id = int(row[0])
    await _write_gpus(conn, ws, stored_id, host_id, gpu_ids, start, end)
    stored = await get_by_id(conn, ws, stored_id)
    # A booking may start a few minutes back: what was observed since counts already.
    await recredit(
        conn,
        ws,
        host_id,
        max_gap_us,
        [(b, 1) for b in stored.bookings(ws, start, end)],
        (start, end),
    )
    if user_id != ctx.user_id:
        await record(
            session,
            ctx,
            "reservation.create_for_member",
            target=stored.shown.reservation_id,
            detail={"memberEmail": email},
        )
    return stored.shown


async def get_by_id(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, rid: int
) -> StoredReservation:
    cur = await conn.execute(_SELECT + " AND r.id = %(id)s", {"ws": workspace_id, "id": rid})
    row = await cur.fetchone()
    assert row is not None
    return _stored(row)


def _may_change(ctx: WorkspaceContext, stored: StoredReservation) -> None:
    if ctx.role != "admin" and stored.user_id != ctx.user_id:
        raise Forbidden("Only the member who booked it, or an admin, may change this booking.")


async def _move(
    session: AsyncSession,
    ctx: WorkspaceContext,
    stored: StoredReservation,
    start: datetime,
    end: datetime,
) -> ReservationOut:
    """Give a stored booking a new range and credit the difference."""
    conn = await report_connection(session)
    ws = ctx.workspace_id
    max_gap_us = await _lock_host(conn, ws, stored.host_id)
    await _refuse_overlap(conn, ws, stored.gpu_ids, start, end, other_than=stored.id)
    await conn.execute(
        "UPDATE reservations SET during = tstzrange(%s, %s) WHERE workspace_id = %s AND id = %s",
        [start, end, ws, stored.id],
    )
    try:
        async with conn.transaction():
            await conn.execute(
                "UPDATE reservation_gpus SET during = tstzrange(%s, %s) "
                "WHERE workspace_id = %s AND reservation_id = %s",
                [start, end, ws, stored.id],
            )
    except psycopg.errors.ExclusionViolation:
        raise Conflict("Those GPUs are already booked for part of that time.") from None
    changes = [(b, -1) for b in stored.bookings(ws, stored.start, stored.end)]
    changes += [(b, 1) for b in stored.bookings(ws, start, end)]
    span = (min(stored.start, start), max(stored.end, end))
    await recredit(conn, ws, stored.host_id, max_gap_us, changes, span)
    return (await get_by_id(conn, ws, stored.id)).shown


async def update(
    session: AsyncSession,
    ctx: WorkspaceContext,
    public: str,
    body: ReservationPatch,
    now: datetime | None = None,
) -> ReservationOut:
    now = _now(now)
    conn = await report_connection(session)
    stored = await get(conn, ctx.workspace_id, public)
    _may_change(ctx, stored)
    start = stored.start if body.start is None else rules.whole_minute("start", body.start)
    end = stored.end if body.end is None else rules.whole_minute("end", body.end)
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if (start, end) != (stored.start, stored.end):
        if stored.end <= now:
            raise Unprocessable("This booking is over; its past cannot be changed.")
        if start != stored.start and stored.start <= now:
            raise Unprocessable("This booking has started; its start cannot move.")
        if end < now:
            raise Unprocessable(
                f"end ({end.isoformat()}) is in the past; moving a booking never changes "
                "its past. Cancel it to end it now."
            )
        if start != stored.start:
            rules.check_range(start, end, ctx.workspace.max_reservation_days, now)
        elif end <= start:
            raise Unprocessable(
                f"end ({end.isoformat()}) must be after start ({start.isoformat()})."
            )
        elif end - start > timedelta(days=ctx.workspace.max_reservation_days):
            raise Unprocessable(
                f"A booking is at most {ctx.workspace.max_reservation_days} day(s) long (the "
                "workspace's maxReservationDays)."
            )
        await _move(session, ctx, stored, start, end)
    if body.note is not None:
        await conn.execute(
            "UPDATE reservations SET note = %s WHERE workspace_id = %s AND id = %s",
            [body.note, ctx.workspace_id, stored.id],
        )
    if stored.user_id != ctx.user_id:
        await record(session, ctx, "reservation.update_for_member", target=public)
    return (await get_by_id(conn, ctx.workspace_id, stored.id)).shown


async def cancel(
    session: AsyncSession, ctx: WorkspaceContext, public: str, now: datetime | None = None
) -> None:
    """Cancel: a booking not started yet goes; a running one ends now (its past stays)."""
    now = _now(now)
    conn = await report_connection(session)
    stored = await get(conn, ctx.workspace_id, public)
    _may_change(ctx, stored)
    if stored.end <= now:
        raise Conflict("This booking is over already; there is nothing to cancel.")
    if stored.start > now:
        await _lock_host(conn, ctx.workspace_id, stored.host_id)
        await conn.execute(
            "DELETE FROM reservations WHERE workspace_id = %s AND id = %s",
            [ctx.workspace_id, stored.id],
        )
    else:
        await _move(session, ctx, stored, stored.start, now)
        await conn.execute(
            "UPDATE reservations SET cancelled_at = %s WHERE workspace_id = %s AND id = %s",
            [now, ctx.workspace_id, stored.id],
        )
    if stored.user_id != ctx.user_id:
        await record(session, ctx, "reservation.cancel_for_member", target=public)


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
    sql = _SELECT + " AND r.during && tstzrange(%(lo)s, %(hi)s)"
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
