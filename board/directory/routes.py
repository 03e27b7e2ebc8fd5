"""GET …/directory and PUT …/directory/{linuxUser} (board-api.md)."""

from __future__ import annotations

from fastapi import APIRouter

from board.auth.deps import AdminDep, ReaderDep
from board.db.deps import SessionDep
from board.directory import service
from board.directory.schemas import DirectoryEntryIn, DirectoryEntryOut, DirectoryOut

router = APIRouter(prefix="/api/v1/workspaces/{slug}/directory", tags=["directory"])


@router.get("", response_model=DirectoryOut, summary="Linux users' members and teams")
async def directory(ctx: ReaderDep, session: SessionDep) -> DirectoryOut:
    return DirectoryOut(entries=await service.entries(session, ctx.workspace_id))


@router.put(
    "/{linux_user}", response_model=DirectoryEntryOut, summary="Set a Linux user's member and team"
)
async def put_entry(
    linux_user: str, body: DirectoryEntryIn, ctx: AdminDep, session: SessionDep
) -> DirectoryEntryOut:
    return await service.put_entry(session, ctx, linux_user, body)
