"""Booking, moving and cancelling GPUs; who may, and what the figures learn of it.

Every change locks the host row first (board.hosts.locks, the order the ingest path uses),
so a booking change and an ingest batch of the same host never interleave: the batch
sees the booking, or the change re-credits what the batch stored. The exclusion
constraint on reservation_gpus is what keeps two bookings of one GPU apart; the check
before it only finds the other booking's name for the 409.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from board.audit.service import record
from board.auth.deps import WorkspaceContext
from board.db.connection import report_connection
from board.errors import Conflict, Forbidden, NotFound, Unprocessable
from board.hosts.locks import lock_hosts
from board.reservations import busy, queries, resolve, rules
from board.reservations.crediting import Booking, ReservationDelta
from board.reservations.queries import StoredReservation
from board.reservations.schemas import (
    ReservationCreated,
    ReservationIn,
    ReservationOut,
    ReservationPatch,
)
from board.reservations.store import write_figures
from board.rollups.gaps import GapSchedule, load_schedule
from board.rollups.rebuild import host_ticks


def _now(now: datetime | None) -> datetime:
    return now if now is not None else datetime.now(UTC)


async def _lock_host(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, host_id: int, *, bookable: bool = False
) -> GapSchedule:
    """Lock the host (as the ingest path does); its workspace's maxSampleGap schedule.

    `bookable`: refuse a revoked host, judged under the lock (a revocation committed
    while the request waited for it counts).
    """
    rows = await lock_hosts(
        conn,
        "h.id, h.revoked_at IS NOT NULL",
        "h.workspace_id = %s AND h.id = %s",
        [workspace_id, host_id],
    )
    if not rows:
        raise NotFound("No such host in this workspace.")
    if bookable and rows[0][1]:
        raise Conflict("That host was revoked meanwhile; it cannot be booked.")
    return await load_schedule(conn, workspace_id)


async def _locked(
    conn: psycopg.AsyncConnection[Any], ctx: WorkspaceContext, public: str
) -> StoredReservation:
    """The booking as it stands once its host is locked.

    Every change of a booking locks its host first, so what is read after the lock is
    what the change applies to: read before it, a cancel committed meanwhile was undone
    by a move (a cancelled booking running on), or the move of a deleted one was a 500.
    """
    stored = await queries.get(conn, ctx.workspace_id, public)
    await _lock_host(conn, ctx.workspace_id, stored.host_id)
    try:
        return await queries.get(conn, ctx.workspace_id, public)
    except NotFound:
        raise Conflict("This booking was cancelled meanwhile.") from None


async def recredit(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    host_id: int,
    gaps: GapSchedule,
    changes: list[tuple[Booking, int]],
    span: tuple[datetime, datetime],
) -> None:
    """Credit the difference a booking change makes to intervals stored already.

    `changes`: the old range un-credited (-1), the new one credited (+1); `span` covers
    where they differ. Intervals outside it count the same under both and cancel out;
    reading max gap around it finds every interval that reaches into it.
    """
    gap = timedelta(microseconds=gaps.widest_us)
    ticks = await host_ticks(conn, workspace_id, host_id, span[0] - gap, span[1] + gap)
    if len(ticks) < 2:
        return
    delta = ReservationDelta()
    for booking, sign in changes:
        delta.add_booking(booking, sign)
    delta.credit_series(ticks, gaps)
    await write_figures(conn, delta, {host_id: workspace_id})


async def create(
    session: AsyncSession, ctx: WorkspaceContext, body: ReservationIn, now: datetime | None = None
) -> ReservationCreated:
    """Book; the answer warns of each booked GPU someone else is on, if it starts soon."""
    now = _now(now)
    conn = await report_connection(session)
    ws = ctx.workspace_id
    start = rules.whole_minute("start", body.start).astimezone(UTC)
    end = rules.whole_minute("end", body.end).astimezone(UTC)
    host_id = await resolve.host(conn, ws, body.host_id)
    user_id, email = await resolve.member(conn, ctx, body.member_email)
    rules.check_range(start, end, ctx.workspace.max_reservation_days, now)
    gpu_ids = await resolve.gpus(conn, ws, host_id, body.gpu_uuids)
    linux_users = (
        resolve.linux_users(body.linux_users)
        if body.linux_users is not None
        else await resolve.linked_users(conn, ws, user_id)
    )
    gaps = await _lock_host(conn, ws, host_id, bookable=True)
    await resolve.hold_member(conn, ws, user_id)
    await resolve.refuse_overlap(conn, ws, gpu_ids, start, end)
    cur = await conn.execute(
        "INSERT INTO reservations (workspace_id, public_id, host_id, user_id, linux_users, "
        "during, note, created_by) VALUES (%s, %s, %s, %s, %s, tstzrange(%s, %s), %s, %s) "
        "RETURNING id",
        [ws, uuid.uuid4(), host_id, user_id, linux_users, start, end, body.note or "", ctx.user_id],
    )
    row = await cur.fetchone()
    assert row is not None
    stored_id = int(row[0])
    await resolve.write_gpus(conn, ws, stored_id, host_id, gpu_ids, start, end)
    stored = await queries.get_by_id(conn, ws, stored_id)
    # A booking may start a few minutes back: what was observed since counts already.
    await recredit(
        conn,
        ws,
        host_id,
        gaps,
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
    warnings = []
    if start < now + busy.BUSY_AHEAD:
        warnings = await busy.busy_gpus(
            conn, ws, host_id, gpu_ids, linux_users, ctx.workspace.stale_after_seconds, now
        )
    return ReservationCreated(**dict(stored.shown), warnings=warnings)


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
    gaps = await _lock_host(conn, ws, stored.host_id)
    await resolve.refuse_overlap(conn, ws, stored.gpu_ids, start, end, other_than=stored.id)
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
    await recredit(conn, ws, stored.host_id, gaps, changes, span)
    return (await queries.get_by_id(conn, ws, stored.id)).shown


async def update(
    session: AsyncSession,
    ctx: WorkspaceContext,
    public: str,
    body: ReservationPatch,
    now: datetime | None = None,
) -> ReservationOut:
    conn = await report_connection(session)
    stored = await _locked(conn, ctx, public)
    now = _now(now)  # after the wait for the lock: a cancel that just ended it is past
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
            raise rules.RangeRefused(
                f"end ({end.isoformat()}) is in the past; moving a booking never changes "
                "its past. Cancel it to end it now.",
                "end_past",
                start,
                end,
            )
        if start < stored.start or end > stored.end:
            await resolve.refuse_revoked(conn, ctx.workspace_id, stored.host_id)
        if start != stored.start:
            rules.check_range(start, end, ctx.workspace.max_reservation_days, now)
        elif end <= start:
            raise rules.reversed_range(start, end)
        elif end > stored.end and end - start > timedelta(days=ctx.workspace.max_reservation_days):
            # Only growing is held to the limit: a booking made before an admin lowered
            # maxReservationDays may still be shortened.
            raise rules.too_long(start, end, ctx.workspace.max_reservation_days)
        await _move(session, ctx, stored, start, end)
    if body.note is not None:
        await conn.execute(
            "UPDATE reservations SET note = %s WHERE workspace_id = %s AND id = %s",
            [body.note, ctx.workspace_id, stored.id],
        )
    if stored.user_id != ctx.user_id:
        await record(
            session, ctx, "reservation.update_for_member", target=stored.shown.reservation_id
        )
    return (await queries.get_by_id(conn, ctx.workspace_id, stored.id)).shown


async def cancel(
    session: AsyncSession, ctx: WorkspaceContext, public: str, now: datetime | None = None
) -> None:
    """Cancel: a booking not started yet goes; a running one ends now (its past stays)."""
    conn = await report_connection(session)
    stored = await _locked(conn, ctx, public)
    now = _now(now)  # after the wait for the lock: a cancel that just ended it is past
    _may_change(ctx, stored)
    if stored.end <= now:
        raise Conflict("This booking is over already; there is nothing to cancel.")
    if stored.start > now:
        gaps = await _lock_host(conn, ctx.workspace_id, stored.host_id)
        # Nothing should be observed in its future range yet; were anything (a fast clock),
        # its booked GPU hours would outlive the booking, which takes only its figure rows
        # with it (ON DELETE CASCADE). Un-credited, the hours are as if never booked.
        changes = [(b, -1) for b in stored.bookings(ctx.workspace_id, stored.start, stored.end)]
        await recredit(
            conn,
            ctx.workspace_id,
            stored.host_id,
            gaps,
            changes,
            (stored.start, stored.end),
        )
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
        await record(
            session, ctx, "reservation.cancel_for_member", target=stored.shown.reservation_id
        )
