"""Workspace settings and members."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from board.auth.deps import WorkspaceDep
from board.runtime import SessionDep
from board.workspaces import service

router = APIRouter(prefix="/api/v1/workspaces/{slug}", tags=["workspaces"])


@router.get("/settings")
async def get_settings(ctx: WorkspaceDep) -> dict[str, Any]:
    return service.settings_of(ctx.workspace)


@router.patch("/settings")
async def patch_settings(
    ctx: WorkspaceDep, session: SessionDep, changes: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    ctx.require("admin")
    workspace = await session.merge(ctx.workspace)
    service.update_settings(workspace, changes)
    await session.flush()
    return service.settings_of(workspace)


class MemberRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    email: Annotated[str, Field(min_length=3, max_length=320)]
    role: str
    password: Annotated[str, Field(min_length=8, max_length=1024)] | None = None


@router.get("/members")
async def list_members(ctx: WorkspaceDep, session: SessionDep) -> dict[str, Any]:
    ctx.require("admin")
    return {
        "members": [
            {"email": u.email, "role": role}
            for u, role in await service.list_members(session, ctx.workspace_id)
        ]
    }


@router.post("/members", status_code=201)
async def add_member(
    ctx: WorkspaceDep, session: SessionDep, request: MemberRequest
) -> dict[str, Any]:
    ctx.require("admin")
    workspace = await session.merge(ctx.workspace)
    member = await service.add_member(
        session, workspace, request.email, request.role, request.password
    )
    return {
        "email": member.user.email,
        "workspace": workspace.slug,
        "role": member.role,
        "apiToken": member.api_token,
    }
