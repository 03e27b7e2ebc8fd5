"""The signed-in person's own account: password, sessions, personal API tokens."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request, Response

from board.audit.deps import ClientAddressDep
from board.audit.service import record, record_for_person
from board.auth import web_sessions
from board.auth.deps import PasswordGateDep, client_address, member_context, memberships_of
from board.auth.models import User
from board.auth.passwords import PasswordsBusy
from board.db.deps import SessionDep
from board.errors import DomainError, Forbidden, Unprocessable
from board.runtime import RuntimeDep
from board.web.deps import PAGE_ROLES, CsrfDep, Page, SignedIn, SignedInDep
from board.web.render import PageRoute, redirect, render
from board.web.sessions import WebSession, clear_session, write_session
from board.workspaces import service as workspaces
from board.workspaces.schemas import IssuedApiToken

router = APIRouter(prefix="/account", route_class=PageRoute, include_in_schema=False)

NOTICES = {
    "password-changed": "Password changed. Every other browser signed in as you was signed out.",
    "token-revoked": "The API token was revoked; it stops working at once.",
}


async def _nav_page(
    request: Request, person: SignedIn, db: SessionDep, wanted: str | None
) -> Page | None:
    """The workspace whose navigation the page shows: the one the person came from (its
    account link says `?w=`), else their first; none for a person in no workspace."""
    memberships = await memberships_of(db, person.user_id)
    # A workspace where the person has no pages (the scheduler role) lends no navigation.
    slugs = [slug for slug, _, role in memberships if role in PAGE_ROLES]
    if not slugs:
        return None
    slug = wanted if wanted in slugs else slugs[0]
    ctx = await member_context(db, slug, person.user_id, client_address(request))
    return Page(ctx=ctx, person=person, workspaces=memberships)


async def _account_page(
    request: Request,
    person: SignedInDep,
    db: SessionDep,
    status_code: int = 200,
    workspace: str | None = None,
    **extra: Any,
) -> Response:
    context = {
        "page": await _nav_page(request, person, db, workspace or request.query_params.get("w")),
        "nav": "account",
        "email": person.email,
        "memberships": await workspaces.api_tokens_by_workspace(db, person.user_id),
        "notice": NOTICES.get(request.query_params.get("notice", "")),
        "error": None,
        "issued": None,
        **extra,
    }
    return render(request, "account.html", context, status_code=status_code)


@router.get("")
async def account(request: Request, person: SignedInDep, db: SessionDep) -> Response:
    return await _account_page(request, person, db)


@router.post("/password")
async def change_password(
    request: Request,
    _csrf: CsrfDep,
    person: SignedInDep,
    db: SessionDep,
    runtime: RuntimeDep,
    gate: PasswordGateDep,
    address: ClientAddressDep,
    current_password: Annotated[str, Form(max_length=1024)] = "",
    new_password: Annotated[str, Form(max_length=1024)] = "",
) -> Response:
    """A new password ends every session of the person; this browser gets a new one."""
    user = await db.get(User, person.user_id)
    try:
        if user is None:
            raise Forbidden("Sign in again.")
        if len(new_password) < 8:
            raise Unprocessable("The new password must be at least 8 characters.")
        if not await gate.verify(user.password_hash, current_password):
            raise Forbidden("The current password is not right.")
        await workspaces.set_password(db, user.id, await gate.hash(new_password))
    except PasswordsBusy:
        error = "The board is busy checking other passwords. Try again in a few seconds."
        return await _account_page(request, person, db, status_code=429, error=error)
    except DomainError as exc:
        return await _account_page(
            request, person, db, status_code=exc.status_code, error=exc.detail
        )
    await web_sessions.end_all(db, user.id)
    secret = await web_sessions.start(db, user.id, runtime.settings.session_max_age_seconds)
    await record_for_person(
        db, "password.changed", user_id=user.id, email=user.email, address=address
    )
    session = WebSession.signed_in(secret)
    request.state.web_session = session
    response = redirect(request, "/account?notice=password-changed")
    write_session(request, response, session, runtime.settings)
    return response


@router.post("/sign-out-everywhere")
async def sign_out_everywhere(
    request: Request,
    _csrf: CsrfDep,
    person: SignedInDep,
    db: SessionDep,
    runtime: RuntimeDep,
    address: ClientAddressDep,
) -> Response:
    """Ends every session of the person, this one included."""
    ended = await web_sessions.end_all(db, person.user_id)
    await record_for_person(
        db,
        "signout.everywhere",
        user_id=person.user_id,
        email=person.email,
        address=address,
        detail={"sessions": ended},
    )
    request.state.web_session = WebSession.anonymous()
    request.state.write_session = False
    response = redirect(request, "/signin")
    clear_session(request, response, runtime.settings)
    return response


@router.post("/api-tokens")
async def issue_token(
    request: Request,
    _csrf: CsrfDep,
    person: SignedInDep,
    db: SessionDep,
    address: ClientAddressDep,
    workspace: Annotated[str, Form(max_length=63)] = "",
) -> Response:
    ctx = await member_context(db, workspace, person.user_id, address)
    try:
        issued = await workspaces.issue_api_token(db, ctx.workspace_id, person.user_id)
        await record(db, ctx, "api_token.issued", target=issued.prefix, address=address)
    except DomainError as exc:
        return await _account_page(
            request, person, db, exc.status_code, ctx.workspace.slug, error=exc.detail
        )
    shown = IssuedApiToken(
        api_token=issued.secret,
        token_prefix=issued.prefix,
        workspace=ctx.workspace.slug,
        role=ctx.role,
    )
    return await _account_page(request, person, db, 201, ctx.workspace.slug, issued=shown)


@router.post("/api-tokens/{prefix}/revoke")
async def revoke_token(
    request: Request,
    prefix: str,
    _csrf: CsrfDep,
    person: SignedInDep,
    db: SessionDep,
    address: ClientAddressDep,
    workspace: Annotated[str, Form(max_length=63)] = "",
) -> Response:
    ctx = await member_context(db, workspace, person.user_id, address)
    await workspaces.revoke_api_token(db, ctx.workspace_id, person.user_id, prefix)
    await record(db, ctx, "api_token.revoked", target=prefix, address=address)
    query = urlencode({"notice": "token-revoked", "w": ctx.workspace.slug})
    return redirect(request, f"/account?{query}#tokens")
