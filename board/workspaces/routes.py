"""Workspace settings and members; the caller's own API tokens (`/api/v1/me`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Response
from pydantic import BaseModel, ConfigDict, Field

from board.auth import web_sessions
from board.auth.deps import PasswordGateDep, TokenDep, WorkspaceDep
from board.runtime import SessionDep
from board.workspaces import service

router = APIRouter(prefix="/api/v1/workspaces/{slug}", tags=["workspaces"])
me_router = APIRouter(prefix="/api/v1/me", tags=["me"])


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
    role: Annotated[str, Field(max_length=20)]
    # Only a brand-new account gets it; an existing account's password is never changed.
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
    ctx: WorkspaceDep,
    session: SessionDep,
    gate: PasswordGateDep,
    body: MemberRequest,
) -> dict[str, Any]:
    ctx.require("admin")
    workspace = await session.merge(ctx.workspace)
    member = await service.add_member(
        session, workspace, body.email, body.role, body.password, gate.hash
    )
    return {
        "email": member.user.email,
        "workspace": workspace.slug,
        "role": member.role,
        "apiToken": member.api_token,
        "existingAccount": member.existing_account,
    }


@router.delete("/members/{email}", status_code=204)
async def remove_member(email: str, ctx: WorkspaceDep, session: SessionDep) -> Response:
    """The membership and its API tokens end at once; so do the person's web sessions
    when this was their last workspace (pages check the membership on every request)."""
    ctx.require("admin")
    user_id = await service.remove_member(session, ctx.workspace_id, email)
    if not await service.has_memberships(session, user_id):
        await web_sessions.end_all(session, user_id)
    return Response(status_code=204)


@router.post("/members/{email}/sign-out", status_code=204)
async def sign_out_member(email: str, ctx: WorkspaceDep, session: SessionDep) -> Response:
    """Sign the member out of every browser (their API tokens are not touched)."""
    ctx.require("admin")
    membership = await service.find_member(session, ctx.workspace_id, email)
    await service.ensure_may_end_all_sessions(session, ctx.user_id, membership.user_id)
    await web_sessions.end_all(session, membership.user_id)
    return Response(status_code=204)


def _token_view(token: Any) -> dict[str, Any]:
    def iso(at: datetime | None) -> str | None:
        return at.isoformat() if at else None

    return {
        "tokenPrefix": token.token_prefix,
        "createdAt": iso(token.created_at),
        "revokedAt": iso(token.revoked_at),
    }


@me_router.get("/api-tokens")
async def my_tokens(ctx: TokenDep, session: SessionDep) -> dict[str, Any]:
    """The caller's personal API tokens in the token's workspace; never a secret."""
    found = await service.list_api_tokens(session, ctx.workspace_id, ctx.user_id)
    return {"workspace": ctx.workspace.slug, "apiTokens": [_token_view(t) for t in found]}


@me_router.post("/api-tokens", status_code=201)
async def issue_my_token(ctx: TokenDep, session: SessionDep) -> dict[str, Any]:
    """Another token for the same membership (rotate: issue, switch, revoke the old one)."""
    issued = await service.issue_api_token(session, ctx.workspace_id, ctx.user_id)
    return {
        "apiToken": issued.secret,
        "tokenPrefix": issued.prefix,
        "workspace": ctx.workspace.slug,
        "role": ctx.role,
    }


@me_router.delete("/api-tokens/{token_prefix}", status_code=204)
async def revoke_my_token(token_prefix: str, ctx: TokenDep, session: SessionDep) -> Response:
    await service.revoke_api_token(session, ctx.workspace_id, ctx.user_id, token_prefix)
    return Response(status_code=204)
