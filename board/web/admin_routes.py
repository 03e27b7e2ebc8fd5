"""The admin page: enrollment tokens, hosts, members, workspace settings (admins only)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, Response

from board.audit.deps import ClientAddressDep
from board.audit.service import record
from board.auth import web_sessions
from board.auth.deps import PasswordGateDep
from board.auth.models import ROLES
from board.auth.passwords import PasswordsBusy
from board.db.deps import SessionDep
from board.enrollment import service as enrollment
from board.errors import DomainError, TooManyRequests
from board.hosts import service as hosts
from board.runtime import RuntimeDep
from board.web.deps import AdminPageDep, CsrfDep, Page
from board.web.render import PageRoute, redirect, render
from board.workspaces import service as workspaces
from board.zones import iana_zone

router = APIRouter(prefix="/w/{slug}/admin", route_class=PageRoute, include_in_schema=False)

NOTICES = {
    "token-revoked": "The enrollment token was revoked; it can no longer be claimed.",
    "host-revoked": "The host was revoked: its agent's pushes are refused from now on.",
    "settings-saved": "Workspace settings saved.",
    "member-removed": "The member was removed: their API tokens and sessions have ended.",
    "member-signed-out": "The member was signed out of every browser.",
}
SETTING_FIELDS = ("maxSampleGapSeconds", "staleAfterSeconds", "timezone", "retentionDays")


@dataclass(frozen=True)
class MemberForm:
    """What the add-member form shows again after a refusal (never the password)."""

    email: str = ""
    role: str = "member"


def board_url(request: Request, runtime: RuntimeDep) -> str:
    """What agents should use as --server-url: the configured public URL, else this one."""
    configured = runtime.settings.public_url
    return (configured or str(request.base_url)).rstrip("/")


async def _admin_page(
    request: Request,
    page: Page,
    db: SessionDep,
    runtime: RuntimeDep,
    status_code: int = 200,
    **extra: Any,
) -> Response:
    listed = await hosts.list_hosts(db, page.ctx)
    settings = workspaces.settings_of(page.ctx.workspace)
    zone = iana_zone(settings.timezone)
    context = {
        "page": page,
        "nav": "admin",
        "tokens": await enrollment.list_tokens(db, page.ctx.workspace_id),
        "hosts": listed,
        "host_names": {h.host_id: h.display_name for h in listed},
        "members": await workspaces.list_members(db, page.ctx.workspace_id),
        "roles": ROLES,
        "settings": settings,
        # Each dated max sample gap, its start in the workspace's zone (None: always).
        "gap_history": [
            (v.seconds, v.from_.astimezone(zone).strftime("%Y-%m-%d %H:%M") if v.from_ else None)
            for v in settings.max_sample_gap_history
        ],
        "default_ttl": runtime.settings.enrollment_token_ttl_hours,
        "board_url": board_url(request, runtime),
        "public_url_set": bool(runtime.settings.public_url),
        "notice": NOTICES.get(request.query_params.get("notice", "")),
        "error": None,
        "issued": None,
        "new_member": None,
        "form": MemberForm(),
        **extra,
    }
    return render(request, "admin.html", context, status_code=status_code)


@router.get("")
async def admin_page(
    request: Request, page: AdminPageDep, db: SessionDep, runtime: RuntimeDep
) -> Response:
    return await _admin_page(request, page, db, runtime)


async def _failed(
    request: Request, page: Page, db: SessionDep, runtime: RuntimeDep, exc: DomainError, **kw: Any
) -> Response:
    # Nothing of a refused change may be committed by the request's session; the
    # rollback expires the workspace row, which the page reads again.
    await db.rollback()
    await db.refresh(page.ctx.workspace)
    return await _admin_page(
        request, page, db, runtime, status_code=exc.status_code, error=exc.detail, **kw
    )


@router.post("/enrollment-tokens")
async def issue_token(
    request: Request,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    runtime: RuntimeDep,
    address: ClientAddressDep,
    display_name: Annotated[str, Form(max_length=255)] = "",
    expires_in_hours: Annotated[str, Form(max_length=20)] = "",
) -> Response:
    try:
        hours = float(expires_in_hours) if expires_in_hours.strip() else None
    except ValueError:
        hours = -1.0  # refused by the service with its own sentence
    try:
        issued = await enrollment.issue(
            db,
            page.ctx.workspace_id,
            display_name=display_name.strip() or None,
            # Only a blank field means the default: 0 is refused, as the API refuses it.
            expires_in_hours=(
                hours if hours is not None else runtime.settings.enrollment_token_ttl_hours
            ),
        )
        detail = {"displayName": display_name.strip() or None}
        await record(
            db,
            page.ctx,
            "enrollment_token.issued",
            target=issued.prefix,
            detail=detail,
            address=address,
        )
        await db.commit()
    except DomainError as exc:
        return await _failed(request, page, db, runtime, exc)
    return await _admin_page(request, page, db, runtime, status_code=201, issued=issued)


@router.post("/enrollment-tokens/{prefix}/revoke")
async def revoke_token(
    request: Request,
    prefix: str,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    address: ClientAddressDep,
) -> Response:
    await enrollment.revoke(db, page.ctx.workspace_id, prefix)
    await record(db, page.ctx, "enrollment_token.revoked", target=prefix, address=address)
    await db.commit()
    return redirect(request, f"/w/{page.slug}/admin?notice=token-revoked#tokens")


@router.post("/hosts/{host_id}/revoke")
async def revoke_host(
    request: Request,
    host_id: str,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    runtime: RuntimeDep,
    address: ClientAddressDep,
) -> Response:
    # Audited and revoked by the id as the board writes it, never as spelled in the URL.
    host_id = hosts.canonical_host_id(host_id)
    # Another workspace's (or no) host is a 404 before anything is recorded.
    await hosts.get_host_row(db, page.ctx.workspace_id, host_id)
    # Recorded first: revoke_host commits, and the entry must be in that transaction.
    await record(db, page.ctx, "host.revoked", target=host_id, address=address)
    # Commits, and reaches every board process's token cache and open agent sockets.
    await hosts.revoke_host(db, runtime, page.ctx, host_id)
    return redirect(request, f"/w/{page.slug}/admin?notice=host-revoked#hosts")


@router.post("/members")
async def add_member(
    request: Request,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    runtime: RuntimeDep,
    gate: PasswordGateDep,
    address: ClientAddressDep,
    email: Annotated[str, Form(max_length=320)] = "",
    role: Annotated[str, Form(max_length=20)] = "member",
    password: Annotated[str, Form(max_length=1024)] = "",
) -> Response:
    try:
        workspace = await db.merge(page.ctx.workspace)
        member = await workspaces.add_member(
            db, workspace, email, role, password or None, gate.hash
        )
        action, target, detail = member.audited()
        await record(db, page.ctx, action, target=target, detail=detail, address=address)
        await db.commit()
    except PasswordsBusy:
        exc = TooManyRequests("The board is busy hashing passwords. Try again in a few seconds.")
        return await _failed(request, page, db, runtime, exc, form=MemberForm(email, role))
    except DomainError as exc:
        return await _failed(request, page, db, runtime, exc, form=MemberForm(email, role))
    shown = member.shown()
    return await _admin_page(request, page, db, runtime, status_code=201, new_member=shown)


@router.post("/members/{email:path}/remove")
async def remove_member(
    request: Request,
    email: str,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    runtime: RuntimeDep,
    address: ClientAddressDep,
) -> Response:
    try:
        user_id = await workspaces.remove_member(db, page.ctx.workspace_id, email)
        if not await workspaces.has_memberships(db, user_id):
            await web_sessions.end_all(db, user_id)
        target = email.strip().lower()
        await record(db, page.ctx, "member.removed", target=target, address=address)
        await db.commit()
    except DomainError as exc:
        return await _failed(request, page, db, runtime, exc)
    return redirect(request, f"/w/{page.slug}/admin?notice=member-removed#members")


@router.post("/members/{email:path}/sign-out")
async def sign_out_member(
    request: Request,
    email: str,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    address: ClientAddressDep,
) -> Response:
    membership = await workspaces.find_member(db, page.ctx.workspace_id, email)
    await workspaces.ensure_may_end_all_sessions(db, page.ctx.user_id, membership.user_id)
    ended = await web_sessions.end_all(db, membership.user_id)
    detail = {"sessions": ended}
    target = email.strip().lower()
    await record(db, page.ctx, "member.signed_out", target=target, detail=detail, address=address)
    await db.commit()
    return redirect(request, f"/w/{page.slug}/admin?notice=member-signed-out#members")


def _gap_from(raw: str, zones: tuple[str, str]) -> str:
    """The form's local `YYYY-MM-DDTHH:MM` as a time with its offset, in the zone the same
    form sets when that is a zone, else the workspace's; anything else is passed on, so
    the model's sentence says what is wrong."""
    raw = raw.strip()
    try:
        local = datetime.fromisoformat(raw) if len(raw) <= 40 else None
    except ValueError:
        local = None
    if local is None or local.tzinfo is not None:
        return raw
    try:
        zone = iana_zone(zones[0])
    except ValueError:
        zone = iana_zone(zones[1])
    return local.replace(tzinfo=zone).isoformat()


def _setting_value(key: str, raw: str) -> object:
    raw = raw.strip()
    if key == "timezone":
        return raw
    # Anything but a few ASCII digits ("²" is a digit to str.isdigit, int() refuses it)
    # is passed on as text, so the model's sentence says why it is not a whole number.
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 12 else raw


@router.post("/settings")
async def save_settings(
    request: Request,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    runtime: RuntimeDep,
    address: ClientAddressDep,
) -> Response:
    form = await request.form()
    changes = {
        key: _setting_value(key, str(form.get(key, "")))
        for key in SETTING_FIELDS
        if form.get(key) is not None
    }
    gap_from = str(form.get("maxSampleGapFrom") or "").strip()
    if gap_from:  # empty: the new max sample gap holds from now
        zones = (str(form.get("timezone") or "").strip(), page.ctx.workspace.timezone)
        changes["maxSampleGapFrom"] = _gap_from(gap_from, zones)
    try:
        patch = workspaces.parse_settings(changes)
        workspace = await db.merge(page.ctx.workspace)
        changed = await workspaces.update_settings(db, workspace, patch)
        await record(db, page.ctx, "settings.changed", detail=changed, address=address)
        await db.commit()
    except DomainError as exc:
        return await _failed(request, page, db, runtime, exc)
    return redirect(request, f"/w/{page.slug}/admin?notice=settings-saved#settings")
