"""The directory page (admins): every Linux user the hosts reported, and who each one is.

Each row links a Linux user to a member and a team; a Linux user not seen yet may be
entered ahead. Plain forms: POST, then a redirect back.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request, Response
from pydantic import ValidationError

from board.db.connection import report_connection
from board.db.deps import SessionDep
from board.directory import accounts, teams
from board.directory import service as directory
from board.directory.schemas import AccountTeamIn, DirectoryEntryIn, TeamIn
from board.errors import DomainError, Unprocessable
from board.fleet import service as fleet_views
from board.web.deps import AdminPageDep, CsrfDep, Page
from board.web.fleet_people import running_now
from board.web.forms import submit
from board.web.render import PageRoute, redirect, render
from board.workspaces import service as workspaces

router = APIRouter(
    prefix="/w/{slug}/admin/directory", route_class=PageRoute, include_in_schema=False
)


async def _page(
    request: Request,
    page: Page,
    db: SessionDep,
    status_code: int = 200,
    error: str | None = None,
    saved: str | None = None,
) -> Response:
    context = {
        "page": page,
        "nav": "directory",
        "entries": await directory.entries(db, page.ctx.workspace_id),
        # lastSeenAt is the last hour credited (closed intervals only): a user at work
        # now would read "seen 49 min ago", so the page asks the hosts' newest state.
        "running": running_now(await fleet_views.fleet_hosts(db, page.ctx)),
        "members": await workspaces.list_members(db, page.ctx.workspace_id),
        # Each team's contact, whom its budget notices go to (docs/budgets.md).
        "teams": await teams.teams(await report_connection(db), page.ctx.workspace_id),
        # Slurm accounts and their teams (docs/jobs.md).
        "accounts": await accounts.account_teams(
            await report_connection(db), page.ctx.workspace_id
        ),
        "saved": saved,
        "error": error,
    }
    return render(request, "directory.html", context, status_code=status_code)


@router.get("")
async def directory_page(request: Request, page: AdminPageDep, db: SessionDep) -> Response:
    saved = request.query_params.get("saved")
    return await _page(request, page, db, saved=saved[:64] if saved else None)


@router.post("")
async def save_entry(
    request: Request,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    linux_user: Annotated[str, Form(max_length=64)] = "",
    member: Annotated[str, Form(max_length=320)] = "",
    team: Annotated[str, Form(max_length=100)] = "",
) -> Response:
    """Link (or unlink, with both left empty) one Linux user; entered ahead if unseen."""
    name = linux_user.strip()

    async def save() -> Response:
        try:
            body = DirectoryEntryIn.model_validate(
                {"memberEmail": member.strip() or None, "team": team.strip() or None}
            )
        except ValidationError as exc:
            raise Unprocessable(f"team: {exc.errors()[0]['msg']}") from None
        await directory.put_entry(db, page.ctx, name, body)
        return redirect(
            request, f"/w/{page.slug}/admin/directory?saved={quote(name, safe='')}#directory"
        )

    async def refused(exc: DomainError) -> Response:
        return await _page(request, page, db, exc.status_code, exc.detail)

    return await submit(db, page, save, refused)


@router.post("/teams")
async def save_team(
    request: Request,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    team: Annotated[str, Form(max_length=200)] = "",
    contact: Annotated[str, Form(max_length=400)] = "",
) -> Response:
    """Set (or clear, left empty) a team's contact email."""

    async def save() -> Response:
        try:
            body = TeamIn.model_validate({"contactEmail": contact.strip() or None})
        except ValidationError as exc:
            raise Unprocessable(f"contactEmail: {exc.errors()[0]['msg']}") from None
        await teams.put_team(db, page.ctx, team, body)
        return redirect(
            request, f"/w/{page.slug}/admin/directory?saved={quote(team[:64], safe='')}#teams"
        )

    async def refused(exc: DomainError) -> Response:
        return await _page(request, page, db, exc.status_code, exc.detail)

    return await submit(db, page, save, refused)


@router.post("/accounts")
async def save_account(
    request: Request,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    account: Annotated[str, Form(max_length=200)] = "",
    team: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    """Map a scheduler account to a team (or forget it, the team left empty)."""

    async def save() -> Response:
        try:
            body = AccountTeamIn.model_validate({"team": team.strip() or None})
        except ValidationError as exc:
            raise Unprocessable(f"team: {exc.errors()[0]['msg']}") from None
        await accounts.put_account(db, page.ctx, account, body)
        return redirect(
            request, f"/w/{page.slug}/admin/directory?saved={quote(account[:64], safe='')}#accounts"
        )

    async def refused(exc: DomainError) -> Response:
        return await _page(request, page, db, exc.status_code, exc.detail)

    return await submit(db, page, save, refused)
