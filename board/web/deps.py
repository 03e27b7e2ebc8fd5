"""Who is looking at a page: the session cookie, the signed-in person, the workspace of the URL."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Request

from board.auth import web_sessions
from board.auth.deps import ClientAddressDep, WorkspaceContext, member_context, memberships_of
from board.auth.models import READER_ROLES
from board.auth.signin_limits import SignInLimits
from board.db.deps import SessionDep
from board.errors import Forbidden
from board.runtime import RuntimeDep
from board.web.sessions import CSRF_FIELD, WebSession, read_session


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
    """The person whose session row still exists: signed out anywhere is signed out here."""
    if web.secret is None:
        raise SignInRequired
    found = await web_sessions.find(db, web.secret)
    if found is None:
        raise SignInRequired
    return SignedIn(user_id=found.user_id, email=found.email, session=web)


SignedInDep = Annotated[SignedIn, Depends(signed_in)]


# The roles with pages; the scheduler role (a bridge's token) has none.
PAGE_ROLES = READER_ROLES
NO_PAGES = (
    "The scheduler role has no pages: it posts a scheduler's job records and reads the "
    "jobs list through the API (docs/jobs.md)."
)


@dataclass(frozen=True)
class Page:
    """What every workspace page needs: the tenancy context and the workspace switcher."""

    ctx: WorkspaceContext
    person: SignedIn
    workspaces: list[tuple[str, str, str]]

    @property
    def slug(self) -> str:
        return self.ctx.workspace.slug


async def workspace_page(
    slug: Annotated[str, Path()], person: SignedInDep, db: SessionDep, address: ClientAddressDep
) -> Page:
    ctx = await member_context(db, slug, person.user_id, address)
    if ctx.role not in PAGE_ROLES:
        raise Forbidden(NO_PAGES)
    return Page(ctx=ctx, person=person, workspaces=await memberships_of(db, person.user_id))


PageDep = Annotated[Page, Depends(workspace_page)]


def _page_with_role(*roles: str) -> Callable[[Page], Awaitable[Page]]:
    async def check(page: PageDep) -> Page:
        page.ctx.require(*roles)
        return page

    return check


# Roles in the signature of page routes, as AdminDep & co. for the API (board.auth.deps).
AdminPageDep = Annotated[Page, Depends(_page_with_role("admin"))]
MemberPageDep = Annotated[Page, Depends(_page_with_role("admin", "member"))]


async def csrf_checked(request: Request, web: WebSessionDep) -> None:
    """Every form post carries the session's CSRF token; a missing or wrong one is 403."""
    form = await request.form()
    submitted = form.get(CSRF_FIELD)
    if not isinstance(submitted, str) or not web.csrf_matches(submitted):
        raise Forbidden(
            "This form has expired or did not come from this board. Reload the page and retry."
        )


CsrfDep = Annotated[None, Depends(csrf_checked)]


def signin_limits(runtime: RuntimeDep) -> SignInLimits:
    settings = runtime.settings
    return SignInLimits(
        max_failures=settings.signin_max_failures,
        max_per_address=settings.signin_max_failures_per_address,
        window_seconds=settings.signin_window_seconds,
    )


SignInLimitsDep = Annotated[SignInLimits, Depends(signin_limits)]
