"""Sign in, sign out, and where a signed-in person lands."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request, Response

from board.audit.deps import ClientAddressDep
from board.audit.service import record_for_person
from board.auth import signin_limits, web_sessions
from board.auth.deps import PasswordGateDep, memberships_of
from board.auth.emails import plausible_email
from board.auth.passwords import PasswordsBusy
from board.db.deps import SessionDep
from board.errors import Forbidden
from board.runtime import RuntimeDep
from board.web.deps import (
    CsrfDep,
    SignedInDep,
    SignInLimitsDep,
    SignInRequired,
    WebSessionDep,
    signed_in,
)
from board.web.render import PageRoute, redirect, render
from board.web.sessions import WebSession, clear_session, write_session
from board.web.signin_page import safe_next, signin_page
from board.workspaces.service import find_user

router = APIRouter(route_class=PageRoute, include_in_schema=False)

_REFUSED = "Wrong email or password."
_BUSY_SECONDS = 5


@router.get("/")
async def home(person: SignedInDep, db: SessionDep, request: Request) -> Response:
    workspaces = await memberships_of(db, person.user_id)
    if len(workspaces) == 1:
        return redirect(request, f"/w/{workspaces[0][0]}/")
    return render(request, "workspaces.html", {"workspaces": workspaces, "email": person.email})


@router.get("/workspaces/switch")
async def switch(person: SignedInDep, request: Request, slug: str = "") -> Response:
    # The workspace page itself answers 404 to a slug the person is not a member of.
    return redirect(request, f"/w/{slug}/" if slug else "/")


@router.get("/signin")
async def signin_form(
    request: Request, web: WebSessionDep, db: SessionDep, runtime: RuntimeDep, next: str = "/"
) -> Response:
    try:
        await signed_in(web, db)
        return redirect(request, safe_next(next))
    except SignInRequired:
        pass
    return signin_page(request, runtime.settings, next=next)


def _refused(
    request: Request, context: dict[str, str], error: str, status: int, retry: int = 0
) -> Response:
    settings = request.app.state.runtime.settings
    response = signin_page(
        request,
        settings,
        next=context["next"],
        email=context["email"],
        error=error,
        status_code=status,
    )
    if retry:
        response.headers["Retry-After"] = str(retry)
    return response


def password_signin_on(runtime: RuntimeDep) -> None:
    """403 before anything else (the form's token included) when passwords are off."""
    if not runtime.settings.password_signin:
        raise Forbidden(
            "Password sign-in is turned off on this board: use a single sign-on button "
            "on the sign-in page."
        )


@router.post("/signin")
async def signin(
    request: Request,
    _password_signin: Annotated[None, Depends(password_signin_on)],
    _csrf: CsrfDep,
    web: WebSessionDep,
    db: SessionDep,
    runtime: RuntimeDep,
    gate: PasswordGateDep,
    limits: SignInLimitsDep,
    address: ClientAddressDep,
    email: Annotated[str, Form(max_length=320)] = "",
    password: Annotated[str, Form(max_length=1024)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/",
) -> Response:
    email = email.strip().lower()
    context = {"next": safe_next(next), "email": email if plausible_email(email) else ""}
    # Counted before the password is checked, in PostgreSQL: the limit holds across workers.
    retry = await signin_limits.count_attempt(runtime.pool, limits, email, address)
    if retry:
        minutes = max(1, round(retry / 60))
        error = f"Too many failed attempts. Try again in {minutes} min."
        return _refused(request, context, error, 429, retry)
    user = await find_user(db, email)
    try:
        ok = await gate.verify(user.password_hash if user is not None else None, password)
    except PasswordsBusy:
        error = "The board is busy checking other sign-ins. Try again in a few seconds."
        return _refused(request, context, error, 429, _BUSY_SECONDS)
    if user is None or not ok:
        user_id = None if user is None else user.id
        detail = {"method": "password", "reason": "wrong email or password"}
        await record_for_person(
            db, "signin.failed", user_id=user_id, email=email, address=address, detail=detail
        )
        return _refused(request, context, _REFUSED, 401)
    await signin_limits.succeeded(runtime.pool, email, address)
    if web.secret is not None:  # signing in again: the browser's old session ends here
        await web_sessions.end(db, web.secret)
    secret = await web_sessions.start(db, user.id, runtime.settings.session_max_age_seconds)
    await record_for_person(
        db,
        "signin.succeeded",
        user_id=user.id,
        email=email,
        address=address,
        detail={"method": "password"},
    )
    response = redirect(request, safe_next(next))
    write_session(request, response, WebSession.signed_in(secret), runtime.settings)
    return response


@router.post("/signout")
async def signout(
    request: Request,
    _csrf: CsrfDep,
    web: WebSessionDep,
    db: SessionDep,
    runtime: RuntimeDep,
    address: ClientAddressDep,
) -> Response:
    """Ends the session on the server: a copy of the cookie is worthless afterwards."""
    if web.secret is not None:
        person = await web_sessions.find(db, web.secret)
        if person is not None:
            await record_for_person(
                db, "signout", user_id=person.user_id, email=person.email, address=address
            )
        await web_sessions.end(db, web.secret)
    request.state.web_session = WebSession.anonymous()
    request.state.write_session = False
    response = redirect(request, "/signin")
    clear_session(request, response, runtime.settings)
    return response
