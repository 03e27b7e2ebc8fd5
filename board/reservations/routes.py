"""REST for reservations (board-api.md): book, list, move, cancel, the feed, the report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request, Response

from board.auth.deps import MemberDep, ReaderDep
from board.db.connection import report_connection
from board.db.deps import SessionDep
from board.errors import Unprocessable, answers
from board.reportkit import params
from board.reportkit.slots import report_slot
from board.reservations import feed, queries, report, service
from board.reservations.calendar import ics
from board.reservations.params import parse_moment
from board.reservations.schemas import (
    CalendarFeedOut,
    ReservationCreated,
    ReservationIn,
    ReservationList,
    ReservationOut,
    ReservationPatch,
)
from board.settings import SettingsDep

router = APIRouter(prefix="/api/v1/workspaces/{slug}", tags=["reservations"])
# The secret feed URL: no Authorization header (calendar apps send none), the token in
# the query, never in the path (the access log writes paths).
calendar_router = APIRouter(tags=["reservations"])
Text = Annotated[str | None, Query(max_length=200)]
CALENDAR: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/calendar": {"schema": {"type": "string"}}}},
}
BOOKING_CONFLICT = answers(
    409,
    meaning={
        409: "Those GPUs are booked for part of that time, or the host, the member or the "
        "booking changed meanwhile."
    },
)
CSV_ALTERNATIVE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}},
    429: {"description": "The workspace's reports are all running; see Retry-After."},
}


@router.post(
    "/reservations",
    status_code=201,
    response_model=ReservationCreated,
    summary="Book GPUs",
    responses=BOOKING_CONFLICT,
)
async def book(body: ReservationIn, ctx: MemberDep, session: SessionDep) -> ReservationCreated:
    """Book GPUs; `warnings` names each one someone else is on now, if it starts soon."""
    return await service.create(session, ctx, body)


async def _listed(
    session: SessionDep,
    workspace_id: int,
    from_: str | None,
    to: str | None,
    host_id: str | None,
    member_email: str | None,
) -> list[ReservationOut]:
    start = parse_moment("from", from_) or datetime.now(UTC) - timedelta(days=1)
    end = parse_moment("to", to)
    if end is not None and end < start:
        # PostgreSQL refuses a reversed range; the caller gets the reason instead.
        shown = "a day ago" if from_ is None or not from_.strip() else start.isoformat()
        raise Unprocessable(f"to ({end.isoformat()}) must not be before from ({shown}).")
    return await queries.list_reservations(session, workspace_id, start, end, host_id, member_email)


@router.get("/reservations", response_model=ReservationList, summary="List bookings")
async def list_reservations(
    ctx: ReaderDep,
    session: SessionDep,
    from_: Annotated[str | None, Query(alias="from", max_length=64)] = None,
    to: Annotated[str | None, Query(max_length=64)] = None,
    host_id: Annotated[str | None, Query(alias="hostId", max_length=64)] = None,
    member_email: Annotated[str | None, Query(alias="memberEmail", max_length=320)] = None,
) -> ReservationList:
    listed = await _listed(session, ctx.workspace_id, from_, to, host_id, member_email)
    return ReservationList(reservations=listed)


@router.get(
    "/reservations.ics",
    response_class=Response,
    responses=CALENDAR,
    summary="Bookings as an iCalendar feed",
)
async def calendar_feed(
    ctx: ReaderDep,
    session: SessionDep,
    from_: Annotated[str | None, Query(alias="from", max_length=64)] = None,
    to: Annotated[str | None, Query(max_length=64)] = None,
    host_id: Annotated[str | None, Query(alias="hostId", max_length=64)] = None,
    member_email: Annotated[str | None, Query(alias="memberEmail", max_length=320)] = None,
) -> Response:
    listed = await _listed(session, ctx.workspace_id, from_, to, host_id, member_email)
    names = await report.host_names(await report_connection(session), ctx.workspace_id)
    return Response(ics(ctx.workspace.slug, names, listed), media_type="text/calendar")


@router.get("/reservations/{reservation_id}", response_model=ReservationOut, summary="One booking")
async def one(reservation_id: str, ctx: ReaderDep, session: SessionDep) -> ReservationOut:
    conn = await report_connection(session)
    return (await queries.get(conn, ctx.workspace_id, reservation_id)).shown


@router.patch(
    "/reservations/{reservation_id}",
    response_model=ReservationOut,
    summary="Move or change a booking",
    responses=BOOKING_CONFLICT,
)
async def move(
    reservation_id: str, body: ReservationPatch, ctx: MemberDep, session: SessionDep
) -> ReservationOut:
    return await service.update(session, ctx, reservation_id, body)


@router.delete(
    "/reservations/{reservation_id}",
    status_code=204,
    response_class=Response,
    summary="Cancel a booking",
    responses=answers(409, meaning={409: "The booking is over already."}),
)
async def cancel(reservation_id: str, ctx: MemberDep, session: SessionDep) -> Response:
    await service.cancel(session, ctx, reservation_id)
    return Response(status_code=204)


@router.get(
    "/reports/reservations",
    response_model=report.ReservationReportOut,
    responses=CSV_ALTERNATIVE,
    summary="Booked and used GPU-hours",
)
async def reservations_report(
    ctx: ReaderDep,
    request: Request,
    from_: Annotated[str, Query(alias=params.FROM, min_length=1, description=params.BOUND_HELP)],
    to: Annotated[str, Query(alias=params.TO, min_length=1, description=params.BOUND_HELP)],
    group_by: Annotated[str | None, Query(alias="groupBy")] = None,
    tz: Text = None,
    fmt: Annotated[str | None, Query(alias="format")] = None,
) -> Response:
    asked = report.parse_query(from_, to, group_by, tz, fmt)
    # A heavy report like the usage report: it holds one of the workspace's report slots
    # (all taken: 429 with Retry-After), on a connection of its own.
    async with report_slot(request, ctx.workspace_id) as conn:
        built = await report.build_asked(conn, ctx.workspace_id, asked)
    if built.format == "csv":
        span = f"{built.window.start.date().isoformat()}-{built.window.end.date().isoformat()}"
        name = f"{ctx.workspace.slug}-reservations-{span}.csv"
        return Response(
            built.csv(),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )
    return Response(built.json(), media_type="application/json")


@router.post(
    "/calendar-feed",
    status_code=201,
    response_model=CalendarFeedOut,
    summary="A new secret calendar feed URL",
)
async def new_calendar_feed(
    request: Request, ctx: ReaderDep, session: SessionDep, settings: SettingsDep
) -> CalendarFeedOut:
    """A secret feed URL for the caller (shown once); it replaces the previous one."""
    issued = await feed.issue(session, ctx)
    base = (settings.public_url or str(request.base_url)).rstrip("/")
    query = urlencode({"token": issued.secret})
    return CalendarFeedOut(feed_url=f"{base}{feed.FEED_PATH}?{query}", token_prefix=issued.prefix)


@router.delete(
    "/calendar-feed",
    status_code=204,
    response_class=Response,
    summary="Revoke your calendar feed URL",
)
async def revoke_calendar_feed(ctx: ReaderDep, session: SessionDep) -> Response:
    await feed.revoke(session, ctx)
    return Response(status_code=204)


@calendar_router.get(
    feed.FEED_PATH,
    response_class=Response,
    summary="Bookings by secret feed URL (no Authorization header)",
    responses={**CALENDAR, **answers(404, meaning={404: "No such calendar feed."})},
)
async def secret_calendar_feed(
    session: SessionDep,
    token: Annotated[str, Query(max_length=feed.MAX_TOKEN_CHARS)] = "",
) -> Response:
    """The workspace's bookings from a day ago on, as `reservations.ics` lists them."""
    owner = await feed.owner(session, token)
    start = datetime.now(UTC) - timedelta(days=1)
    listed = await queries.list_reservations(session, owner.workspace_id, start, None)
    names = await report.host_names(await report_connection(session), owner.workspace_id)
    return Response(
        ics(owner.slug, names, listed),
        media_type="text/calendar",
        headers={"Cache-Control": "private, no-store", "Referrer-Policy": "no-referrer"},
    )
