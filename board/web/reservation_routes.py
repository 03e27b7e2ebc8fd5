"""The reservations page: the timeline, booking a host's GPUs, and one's own bookings.

Plain forms (POST, then a redirect) work without script; reservations.js only reloads
the page when the host picked in the booking form changes, to offer its GPUs. Times in
the forms are the workspace's local time, written YYYY-MM-DD HH:MM as the page shows
them (a browser's date picker would show its own locale's format beside them).
A booking that starts soon on GPUs someone else is on is not stored at first: the page
names who is on them and asks to "Book anyway".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import partial
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Query, Request, Response
from pydantic import ValidationError

from board.db.connection import report_connection
from board.db.deps import SessionDep
from board.errors import DomainError, Unprocessable
from board.reservations import feed, queries, service, timeline
from board.reservations.schemas import BusyGpu, ReservationIn, ReservationOut, ReservationPatch
from board.settings import SettingsDep
from board.web.deps import CsrfDep, MemberPageDep, Page, PageDep
from board.web.forms import submit
from board.web.render import PageRoute, redirect, render
from board.web.reservation_words import LABELS, SHOWN, Words, confirmation
from board.workspaces import service as workspaces

router = APIRouter(prefix="/w/{slug}/reservations", route_class=PageRoute, include_in_schema=False)

NOTICES = {
    "booked": "Booked.",
    "changed": "The booking's end was changed.",
    "cancelled": "The booking was cancelled (a running one ended now).",
}


TIME_PATTERN = r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}"


class _NotConfirmed(Exception):
    """A booking that starts soon on GPUs someone else is on, not confirmed yet."""

    def __init__(self, busy: list[BusyGpu]) -> None:
        super().__init__("not confirmed")
        self.busy = busy


@dataclass(frozen=True)
class BookingForm:
    """What the booking form shows again after a refusal."""

    host: str = ""
    gpus: tuple[str, ...] = ()
    start: str = ""
    end: str = ""
    note: str = ""
    member: str = ""


def _zone(page: Page) -> tzinfo:
    return timeline.zone_of(page.ctx.workspace.timezone)


def _local_input(moment: datetime, zone: tzinfo) -> str:
    return moment.astimezone(zone).strftime(SHOWN)


def _parse_local(label: str, value: str, zone: tzinfo) -> datetime:
    """A time field (YYYY-MM-DD HH:MM local, or an ISO time with an offset) as an aware time."""
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise Unprocessable(
            f"{label}: {value[:40]!r} is not a date and time; write it as YYYY-MM-DD HH:MM."
        ) from None
    if moment.second or moment.microsecond:
        raise Unprocessable(f"{label}: bookings start and end on whole minutes (HH:MM).")
    if moment.tzinfo is not None:
        return moment
    local = moment.replace(tzinfo=zone)
    # A wall time the clocks skip (02:30 on a spring-forward night) has no instant; zoneinfo
    # would quietly move it an hour, and the booking would start when nobody asked.
    if local.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != moment:
        raise Unprocessable(f"{label}: {value[:40]} does not exist in {zone}: the clocks skip it.")
    return local


async def _page(
    request: Request,
    page: Page,
    db: SessionDep,
    host: str = "",
    status_code: int = 200,
    form: BookingForm | None = None,
    refusal: DomainError | None = None,
    feed_url: str | None = None,
    gpu: str = "",
    busy: list[BusyGpu] | None = None,
    prefill: BookingForm | None = None,
) -> Response:
    """The page; `refusal` of the booking form (`form` given) or of a booking's change,
    `busy`: the GPUs someone else is on, for the form's "Book anyway"."""
    now = datetime.now(UTC)
    zone = _zone(page)
    conn = await report_connection(db)
    start, end = timeline.window(now)
    host = host if timeline.is_host_id(host) else ""
    gpus = await timeline.bookable_gpus(conn, page.ctx.workspace_id)
    in_window = await queries.list_reservations(db, page.ctx.workspace_id, start, end)
    drawn = timeline.build(gpus, in_window, start, end, now, zone, host or None)
    is_admin = page.ctx.role == "admin"
    mine = await queries.list_reservations(
        db, page.ctx.workspace_id, now, None, member_email=None if is_admin else page.ctx.email
    )
    hosts = list(dict.fromkeys((g.host_id, g.host_name) for g in gpus))
    names = dict(hosts)
    words = Words(zone, names, {(g.host_id, g.uuid): g.index for g in gpus})
    default_start = now.replace(second=0, microsecond=0)
    # From a GPU card's "Book this GPU", or the "Find GPUs" page's "Book these".
    wanted = {gpu, *(prefill.gpus if prefill else ())}
    picked = tuple(g.uuid for g in gpus if g.host_id == host and g.uuid in wanted)
    booking_refused = form is not None
    error = None
    if refusal is not None:
        error = words.refusal(refusal, form.host if form else "", new_end=not booking_refused)
    form = form or BookingForm(
        host=host,
        gpus=picked,
        start=(prefill and prefill.start) or _local_input(default_start, zone),
        end=(prefill and prefill.end)
        or _local_input(default_start.replace(minute=0) + timedelta(hours=3), zone),
    )
    context: dict[str, Any] = {
        "page": page,
        "nav": "reservations",
        "timeline": drawn,
        "host": host,
        "hosts": hosts,
        "host_names": names,
        "form_gpus": [g for g in gpus if g.host_id == (form.host or host)],
        "form": form,
        "members": await workspaces.list_members(db, page.ctx.workspace_id) if is_admin else [],
        "may_book": page.ctx.role in ("admin", "member"),
        "bookings": mine,
        "all_members": is_admin,
        "zone_name": str(zone),
        # What the time inputs take: the page's own way of writing a time (SHOWN).
        "time_pattern": TIME_PATTERN,
        "local_input": lambda moment: _local_input(moment, zone),
        "now": now,
        "words": words,
        "notice": NOTICES.get(request.query_params.get("notice", "")),
        # A refused booking is told beside its form (the form's POST lands on #book).
        "error": None if booking_refused else error,
        "form_error": error if booking_refused else None,
        "busy": busy or [],
        "confirm": confirmation(busy) if busy else "",
        "feed_url": feed_url,
    }
    return render(request, "reservations.html", context, status_code=status_code)


@router.get("")
async def reservations_page(
    request: Request,
    page: PageDep,
    db: SessionDep,
    host: Annotated[str, Query(max_length=64)] = "",
    gpu: Annotated[str, Query(max_length=128)] = "",
    gpus: Annotated[list[str] | None, Query(max_length=128)] = None,
    start: Annotated[str, Query(max_length=40)] = "",
    end: Annotated[str, Query(max_length=40)] = "",
) -> Response:
    """The page; `host` (and `gpu`, from a GPU card's "Book this GPU"; `gpus`, `start` and
    `end`, from the "Find GPUs" page's "Book these") fill the form."""
    times = [t if re.fullmatch(TIME_PATTERN, t) else "" for t in (start, end)]
    prefill = BookingForm(host, tuple((gpus or [])[:64]), *times)
    return await _page(request, page, db, host, gpu=gpu, prefill=prefill)


def _booking(form: BookingForm, zone: tzinfo, gpus: list[str]) -> ReservationIn:
    fields: dict[str, Any] = {
        "hostId": form.host,
        "start": _parse_local("Start", form.start, zone),
        "end": _parse_local("End", form.end, zone),
        "note": form.note or None,
        "memberEmail": form.member or None,
    }
    if gpus:
        fields["gpuUuids"] = gpus
    try:
        return ReservationIn.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = LABELS.get(str(first["loc"][0]), "The form") if first["loc"] else "The form"
        raise Unprocessable(f"{where}: {first['msg']}") from None


@router.post("")
async def book(
    request: Request,
    _csrf: CsrfDep,
    page: MemberPageDep,
    db: SessionDep,
    host: Annotated[str, Form(max_length=64)] = "",
    gpus: Annotated[list[str] | None, Form(max_length=128)] = None,
    start: Annotated[str, Form(max_length=40)] = "",
    end: Annotated[str, Form(max_length=40)] = "",
    note: Annotated[str, Form(max_length=500)] = "",
    member: Annotated[str, Form(max_length=320)] = "",
    confirm: Annotated[str, Form(max_length=64)] = "",
) -> Response:
    """Book; GPUs someone else is on now are booked only once "Book anyway" confirms them."""
    form = BookingForm(host, tuple(gpus or ())[:64], start, end, note, member)

    async def make() -> Response:
        if len(gpus or ()) > 64:
            raise Unprocessable("GPUs: at most 64 in one booking.")
        made = await service.create(db, page.ctx, _booking(form, _zone(page), list(form.gpus)))
        if made.warnings and confirm != confirmation(made.warnings):
            raise _NotConfirmed(made.warnings)  # not stored: its savepoint is undone
        target = quote(host, safe="") if timeline.is_host_id(host) else ""
        return redirect(request, f"/w/{page.slug}/reservations?host={target}&notice=booked#mine")

    async def refused(exc: DomainError) -> Response:
        return await _page(request, page, db, host, exc.status_code, form, exc)

    try:
        return await submit(db, page, make, refused)
    except _NotConfirmed as unconfirmed:
        # The page names who is on which GPU and asks to confirm.
        await db.refresh(page.ctx.workspace)
        return await _page(request, page, db, host, 200, form, busy=unconfirmed.busy)


async def _refused(request: Request, page: Page, db: SessionDep, exc: DomainError) -> Response:
    """A booking's refused change: the page, the refusal beside the bookings."""
    return await _page(request, page, db, "", exc.status_code, None, exc)


async def _changed(
    request: Request, page: Page, db: SessionDep, notice: str, booking: ReservationOut | None
) -> Response:
    host = booking.host_id if booking is not None else ""
    return redirect(request, f"/w/{page.slug}/reservations?host={host}&notice={notice}#mine")


@router.post("/{reservation_id}/end")
async def change_end(
    request: Request,
    reservation_id: str,
    _csrf: CsrfDep,
    page: MemberPageDep,
    db: SessionDep,
    end: Annotated[str, Form(max_length=40)] = "",
) -> Response:
    async def change() -> Response:
        moment = _parse_local("New end", end, _zone(page))
        changed = await service.update(db, page.ctx, reservation_id, ReservationPatch(end=moment))
        return await _changed(request, page, db, "changed", changed)

    return await submit(db, page, change, partial(_refused, request, page, db))


@router.post("/{reservation_id}/cancel")
async def cancel(
    request: Request,
    reservation_id: str,
    _csrf: CsrfDep,
    page: MemberPageDep,
    db: SessionDep,
) -> Response:
    async def change() -> Response:
        conn = await report_connection(db)
        stored = await queries.get(conn, page.ctx.workspace_id, reservation_id)
        await service.cancel(db, page.ctx, reservation_id)
        return await _changed(request, page, db, "cancelled", stored.shown)

    return await submit(db, page, change, partial(_refused, request, page, db))


@router.post("/calendar-feed")
async def new_calendar_feed(
    request: Request, _csrf: CsrfDep, page: PageDep, db: SessionDep, settings: SettingsDep
) -> Response:
    """A secret calendar URL for the viewer, shown once on the page (it replaces the old)."""
    issued = await feed.issue(db, page.ctx)
    base = (settings.public_url or str(request.base_url)).rstrip("/")
    url = f"{base}{feed.FEED_PATH}?{urlencode({'token': issued.secret})}"
    return await _page(request, page, db, status_code=201, feed_url=url)
