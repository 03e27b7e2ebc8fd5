"""GET …/directory, PUT …/directory/{linuxUser} (board-api.md), PUT
…/directory/teams/{team} (a team's contact, docs/budgets.md) and PUT
…/directory/accounts/{account} (a scheduler account's team, docs/jobs.md)."""

from __future__ import annotations

from fastapi import APIRouter

from board.auth.deps import AdminDep, ReaderDep
from board.db.connection import report_connection
from board.db.deps import SessionDep
from board.directory import accounts, service, teams
from board.directory.schemas import (
    AccountTeamIn,
    AccountTeamOut,
    DirectoryEntryIn,
    DirectoryEntryOut,
    DirectoryOut,
    TeamIn,
    TeamOut,
)

router = APIRouter(prefix="/api/v1/workspaces/{slug}/directory", tags=["directory"])


@router.get("", response_model=DirectoryOut, summary="Linux users' members and teams")
async def directory(ctx: ReaderDep, session: SessionDep) -> DirectoryOut:
    conn = await report_connection(session)
    return DirectoryOut(
        entries=await service.entries(session, ctx.workspace_id),
        teams=await teams.teams(conn, ctx.workspace_id),
        accounts=await accounts.account_teams(conn, ctx.workspace_id),
    )


@router.put("/teams/{team:path}", response_model=TeamOut, summary="Set a team's contact email")
async def put_team(team: str, body: TeamIn, ctx: AdminDep, session: SessionDep) -> TeamOut:
    """Who budget notices about the team go to (null: nobody but the admins)."""
    return await teams.put_team(session, ctx, team, body)


@router.put(
    "/accounts/{account:path}",
    response_model=AccountTeamOut | None,
    summary="Set a scheduler account's team",
)
async def put_account(
    account: str, body: AccountTeamIn, ctx: AdminDep, session: SessionDep
) -> AccountTeamOut | None:
    """The team a Slurm account's jobs count for in the jobs report (null: none; the
    answer is then null)."""
    return await accounts.put_account(session, ctx, account, body)


@router.put(
    "/{linux_user}", response_model=DirectoryEntryOut, summary="Set a Linux user's member and team"
)
async def put_entry(
    linux_user: str, body: DirectoryEntryIn, ctx: AdminDep, session: SessionDep
) -> DirectoryEntryOut:
    return await service.put_entry(session, ctx, linux_user, body)
