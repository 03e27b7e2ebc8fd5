"""Sign in, sign out, and where a signed-in person lands."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, Response
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from board.auth.deps import memberships_of
from board.auth.passwords import verify_password
from board.runtime import RuntimeDep, SessionDep
from board.web.deps import (
    CsrfDep,
    LimiterDep,
    SignedInDep,
    SignInRequired,
    WebSessionDep,
    signed_in,
)
from board.web.render import PageRoute, redirect, render
from board.web.sessions import WebSession, clear_session, write_session
from board.workspaces.models import User

router = APIRouter(route_class=PageRoute, include_in_schema=False)

_REFUSED = "Wrong email or password."


def safe_next(value: str | None) -> str:
    """Only a path on this board: never another site (open redirect)."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    return value


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
    request: Request, web: WebSessionDep, db: SessionDep, next: str = "/"
) -> Response:
    try:
        await signed_in(web, db)
        return redirect(request, safe_next(next))
    except SignInRequired:
        pass
    return render(request, "signin.html", {"next": safe_next(next), "email": "", "error": None})


@router.post("/signin")
async def signin(
    request: Request,
    _csrf: CsrfDep,
    web: WebSessionDep,
    db: SessionDep,
    runtime: RuntimeDep,
    limiter: LimiterDep,
    email: Annotated[str, Form(max_length=320)] = "",
    password: Annotated[str, Form(max_length=1024)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/",
) -> Response:
    email = email.strip().lower()
    address = request.client.host if request.client else "unknown"
    context = {"next": safe_next(next), "email": email}
    if limiter.blocked(email, address):
        minutes = max(1, round(limiter.retry_after(email, address) / 60))
        response = render(
            request,
            "signin.html",
            {**context, "error": f"Too many failed attempts. Try again in {minutes} min."},
            status_code=429,
        )
        response.headers["Retry-After"] = str(limiter.retry_after(email, address))
        return response
    user = await db.scalar(select(User).where(User.email == email)) if email else None
    password_hash = user.password_hash if user is not None else None
    # argon2 is deliberately slow: keep it off the event loop.
    ok = await run_in_threadpool(verify_password, password_hash, password)
    if user is None or not ok:
        limiter.failed(email, address)
        return render(request, "signin.html", {**context, "error": _REFUSED}, status_code=401)
    limiter.succeeded(email, address)
    response = redirect(request, safe_next(next))
    write_session(response, web.signed_in(user.id, user.password_hash), runtime.settings)
    return response


@router.post("/signout")
async def signout(request: Request, _csrf: CsrfDep, runtime: RuntimeDep) -> Response:
    request.state.web_session = WebSession.anonymous()
    request.state.write_session = False
    response = redirect(request, "/signin")
    clear_session(response, runtime.settings)
    return response
