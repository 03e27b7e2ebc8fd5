"""The notices admin page (channels, deliveries, retry, test) and the snooze page.

The snooze page needs no sign-in: its signed link is the permission, and it shows
nothing about the GPU (board.notices.snooze).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Query, Request, Response

from board.audit.deps import ClientAddressDep
from board.audit.service import record
from board.db.deps import SessionDep
from board.errors import DomainError, Unprocessable
from board.notices import service as notices
from board.notices.events import DEFAULT_EVENTS, EVENT_TYPES
from board.notices.schemas import ChannelIn, CreatedChannel
from board.notices.snooze import SNOOZE_HOURS, read_token, snooze
from board.settings import SettingsDep
from board.web.deps import AdminPageDep, CsrfDep, Page, WebSessionDep
from board.web.forms import submit
from board.web.render import PageRoute, redirect, render

router = APIRouter(prefix="/w/{slug}/admin/notices", route_class=PageRoute, include_in_schema=False)
snooze_router = APIRouter(prefix="/notices", route_class=PageRoute, include_in_schema=False)

NOTICES = {
    "channel-removed": "The channel was removed; it receives nothing from now on.",
    "test-queued": "A test notice was queued; its delivery shows below in a few seconds.",
    "retry-queued": "The delivery will be tried again in a few seconds.",
}
ChannelId = Annotated[str, Path(max_length=64)]
# What the page calls each event; the codes stay the form's values and the API's words.
_CONDITION_LABELS = {
    "gpu.idle_held": "GPU idle-held",
    "reservation.idle": "Booked GPU idle",
    "host.stale": "Host stale",
    "host.error": "Host in error",
    "gpu.missing": "GPU missing",
    "gpu.hot": "GPU hot",
    "job.idle": "Job's GPUs unused",
}
EVENT_LABELS = {
    **_CONDITION_LABELS,
    **{f"{code}.resolved": f"{label}: resolved" for code, label in _CONDITION_LABELS.items()},
    "budget.warning": "Budget warning",
    "budget.exceeded": "Budget exceeded",
    "digest.daily": "Daily digest",
    "test": "Test notice",
}
KIND_LABELS = {"webhook": "Webhook", "slack": "Slack", "email": "Email"}


async def _page(
    request: Request,
    page: Page,
    db: SessionDep,
    settings: SettingsDep,
    status: int = 200,
    **extra: Any,
) -> Response:
    context = {
        "page": page,
        "nav": "admin",
        "channels": await notices.list_channels(db, page.ctx.workspace_id),
        "deliveries": await notices.list_deliveries(db, page.ctx.workspace_id),
        "event_types": EVENT_TYPES,
        "event_labels": EVENT_LABELS,
        "kind_labels": KIND_LABELS,
        "default_events": DEFAULT_EVENTS,
        "mail_configured": settings.smtp_url is not None,
        "notice": NOTICES.get(request.query_params.get("notice", "")),
        "error": None,
        "created": None,
        **extra,
    }
    return render(request, "notices.html", context, status_code=status)


@router.get("")
async def notices_page(
    request: Request, page: AdminPageDep, db: SessionDep, settings: SettingsDep
) -> Response:
    return await _page(request, page, db, settings)


@router.post("/channels")
async def add_channel(
    request: Request,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    settings: SettingsDep,
    address: ClientAddressDep,
    kind: Annotated[str, Form(max_length=20)] = "",
    url: Annotated[str, Form(max_length=2000)] = "",
    emails: Annotated[str, Form(max_length=8000)] = "",
) -> Response:
    form = await request.form()
    events = [str(e) for e in form.getlist("events")][:20]

    async def add() -> Response:
        try:
            created = await _add_channel(db, page, settings, address, kind, url, emails, events)
        except ValueError:  # pydantic's, of ChannelIn
            raise Unprocessable(
                "Some of the channel's fields are not valid (at most 20 addresses)."
            ) from None
        # Rendered, not redirected: a webhook's secret is shown this once.
        return await _page(request, page, db, settings, 201, created=created)

    async def refused(exc: DomainError) -> Response:
        return await _page(request, page, db, settings, exc.status_code, error=exc.detail)

    return await submit(db, page, add, refused)


async def _add_channel(
    db: SessionDep,
    page: Page,
    settings: SettingsDep,
    address: str,
    kind: str,
    url: str,
    emails: str,
    events: list[str],
) -> CreatedChannel:
    if kind not in ("webhook", "slack", "email"):
        raise Unprocessable("kind: choose webhook, slack or email.")
    body = ChannelIn.model_validate(
        {
            "kind": kind,
            "url": url.strip() or None if kind != "email" else None,
            "emails": [e for e in emails.replace(",", " ").split() if e][:21]
            if kind == "email"
            else None,
            "events": events or None,
        }
    )
    created: CreatedChannel = await notices.create_channel(db, page.ctx, body, settings)
    detail = {"kind": created.kind, "events": ",".join(created.events)}
    await record(
        db,
        page.ctx,
        "notices.channel_added",
        target=created.channel_id,
        detail=detail,
        address=address,
    )
    return created


@router.post("/channels/{channel_id}/remove")
async def remove_channel(
    request: Request,
    channel_id: ChannelId,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    address: ClientAddressDep,
) -> Response:
    channel_id = notices.canonical_channel_id(channel_id)
    await notices.remove_channel(db, page.ctx, channel_id)
    await record(db, page.ctx, "notices.channel_removed", target=channel_id, address=address)
    return redirect(request, f"/w/{page.slug}/admin/notices?notice=channel-removed")


@router.post("/channels/{channel_id}/test")
async def send_test_notice(
    request: Request,
    channel_id: ChannelId,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    settings: SettingsDep,
    address: ClientAddressDep,
) -> Response:
    channel_id = notices.canonical_channel_id(channel_id)

    async def send() -> Response:
        await notices.send_test(db, page.ctx, channel_id)
        await record(db, page.ctx, "notices.test_sent", target=channel_id, address=address)
        return redirect(request, f"/w/{page.slug}/admin/notices?notice=test-queued#deliveries")

    async def refused(exc: DomainError) -> Response:
        if not isinstance(exc, notices.TestsLimited):
            raise exc  # any other refusal is the error page, as before
        again = await _page(request, page, db, settings, 429, error=exc.detail)
        again.headers["Retry-After"] = str(exc.retry_after)
        return again

    return await submit(db, page, send, refused)


@router.post("/deliveries/{delivery_id}/retry")
async def retry_delivery(
    request: Request,
    delivery_id: Annotated[int, Path(ge=1, le=2**62)],
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    address: ClientAddressDep,
) -> Response:
    await notices.retry_delivery(db, page.ctx, delivery_id)
    await record(db, page.ctx, "notices.retried", target=str(delivery_id), address=address)
    return redirect(request, f"/w/{page.slug}/admin/notices?notice=retry-queued#deliveries")


@snooze_router.get("/snooze")
async def snooze_page(
    request: Request,
    settings: SettingsDep,
    _web: WebSessionDep,  # an anonymous session, so the form carries a CSRF token
    token: Annotated[str, Query(max_length=300)] = "",
) -> Response:
    read_token(settings.resolved_secret_key(), token)  # a bad link is a 404 page
    context = {"page": None, "token": token, "choices": SNOOZE_HOURS, "until": None}
    return render(request, "snooze.html", context)


@snooze_router.post("/snooze")
async def snooze_gpu(
    request: Request,
    _csrf: CsrfDep,  # like every form: the link's token is the permission, CSRF the origin
    db: SessionDep,
    settings: SettingsDep,
    token: Annotated[str, Form(max_length=300)] = "",
    hours: Annotated[int, Form(ge=1, le=168)] = 1,
) -> Response:
    until = await snooze(db, settings.resolved_secret_key(), token, hours, datetime.now(UTC))
    context = {"page": None, "token": "", "choices": SNOOZE_HOURS, "until": until}
    return render(request, "snooze.html", context)
