"""GET …/directory, PUT …/directory/{linuxUser} (board-api.md) and PUT
…/directory/teams/{team} (a team's contact, docs/budgets.md)."""

from __future__ import annotations

from fastapi import APIRouter

from board.auth.deps import AdminDep, ReaderDep
from board.db.connection import report_connection
from board.db.deps import SessionDep
from board.directory import service, teams
from board.directory.schemas import (
    DirectoryEntryIn,
    DirectoryEntryOut,
    DirectoryOut,
    TeamIn,
    TeamOut,
)

router = APIRouter(prefix="/api/v1/workspaces/{slug}/directory", tags=["directory"])


@router.get("", response_model=DirectoryOut, summary="Linux users' members and teams")
async def directory(ctx: ReaderDep, session: SessionDep) -> DirectoryOut:
    return DirectoryOut(
        entries=await service.entries(session, ctx.workspace_id),
        teams=await teams.teams(await report_connection(session), ctx.workspace_id),
    )


@router.put("/teams/{team:path}", response_model=TeamOut, summary="Set a team's contact email")
async def put_team(team: str, body: TeamIn, ctx: AdminDep, session: SessionDep) -> TeamOut:
    """Who budget notices about the team go to (null: nobody but the admins)."""
    return await teams.put_team(session, ctx, team, body)


@router.put(
    "/{linux_user}", response_model=DirectoryEntryOut, summary="Set a Linux user's member and team"
)
async def put_entry(
    linux_user: str, body: DirectoryEntryIn, ctx: AdminDep, session: SessionDep
) -> DirectoryEntryOut:
    return await service.put_entry(session, ctx, linux_user, body)
