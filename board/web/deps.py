"""Who is looking at a page: the session cookie, the signed-in person, the workspace of the URL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import psycopg
from fastapi import Depends, Path, Request
from sqlalchemy.ext.asyncio import AsyncSession

from board.auth.deps import WorkspaceContext, member_context, memberships_of
from board.errors import Forbidden
from board.runtime import RuntimeDep, SessionDep
from board.web.ratelimit import SignInLimiter
from board.web.sessions import CSRF_FIELD, WebSession, password_tag, read_session
from board.workspaces.models import User


class SignInRequired(Exception):
    """No valid signed-in session: pages redirect to the sign-in form, JSON answers 401."""


def web_session(request: Request, runtime: RuntimeDep) -> WebSession:
    """The visitor's session; a visitor without one gets a fresh anonymous one (and its cookie)."""
    found = getattr(request.state, "web_session", None)
    if isinstance(found, WebSession):
        return found
    session = read_session(request, runtime.settings)
    if session is None:
        session = WebSession.anonymous()
        request.state.write_session = True
    request.state.web_session = session
    return session


WebSessionDep = Annotated[WebSession, Depends(web_session)]


@dataclass(frozen=True)
class SignedIn:
    user_id: int
    email: str
    session: WebSession


async def signed_in(web: WebSessionDep, db: SessionDep) -> SignedIn:
    if web.user_id is None:
        raise SignInRequired
    user = await db.get(User, web.user_id)
    # A changed password (or a deleted person) ends the sessions signed in before.
    if user is None or password_tag(user.password_hash) != web.password_tag:
        raise SignInRequired
    return SignedIn(user_id=user.id, email=user.email, session=web)


SignedInDep = Annotated[SignedIn, Depends(signed_in)]


@dataclass(frozen=True)
class Page:
    """What every workspace page needs: the tenancy context and the workspace switcher."""

    ctx: WorkspaceContext
    person: SignedIn
    workspaces: list[tuple[str, str, str]]

    @property
    def slug(self) -> str:
        return self.ctx.workspace.slug


async def workspace_page(slug: Annotated[str, Path()], person: SignedInDep, db: SessionDep) -> Page:
    ctx = await member_context(db, slug, person.user_id)
    return Page(ctx=ctx, person=person, workspaces=await memberships_of(db, person.user_id))


PageDep = Annotated[Page, Depends(workspace_page)]


async def csrf_checked(request: Request, web: WebSessionDep) -> None:
    """Every form post carries the session's CSRF token; a missing or wrong one is 403."""
    form = await request.form()
    submitted = form.get(CSRF_FIELD)
    if not isinstance(submitted, str) or not web.csrf_matches(submitted):
        raise Forbidden(
            "This form has expired or did not come from this board. Reload the page and retry."
        )


CsrfDep = Annotated[None, Depends(csrf_checked)]


def signin_limiter(request: Request, runtime: RuntimeDep) -> SignInLimiter:
    limiter = getattr(request.app.state, "signin_limiter", None)
    if not isinstance(limiter, SignInLimiter):
        limiter = SignInLimiter(
            runtime.settings.signin_max_failures, runtime.settings.signin_window_seconds
        )
        request.app.state.signin_limiter = limiter
    return limiter


LimiterDep = Annotated[SignInLimiter, Depends(signin_limiter)]


async def report_connection(session: AsyncSession) -> psycopg.AsyncConnection[Any]:
    """The request's own connection (and transaction), as psycopg for the report SQL."""
    conn = await session.connection()
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert isinstance(driver, psycopg.AsyncConnection)
    return driver
