"""Enrollment tokens for admins: issue (shown once), list, revoke."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from board.auth.deps import WorkspaceDep
from board.enrollment import service
from board.runtime import RuntimeDep, SessionDep

router = APIRouter(prefix="/api/v1/workspaces/{slug}/enrollment-tokens", tags=["enrollment"])


class IssueRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    displayName: Annotated[str, Field(max_length=255)] | None = None
    expiresInHours: Annotated[float, Field(gt=0, le=720)] | None = None


@router.post("", status_code=201)
async def issue(
    ctx: WorkspaceDep,
    session: SessionDep,
    runtime: RuntimeDep,
    request: Annotated[IssueRequest | None, Body()] = None,
) -> dict[str, Any]:
    ctx.require("admin")
    request = request or IssueRequest()
    issued = await service.issue(
        session,
        ctx.workspace_id,
        display_name=request.displayName,
        expires_in_hours=request.expiresInHours or runtime.settings.enrollment_token_ttl_hours,
    )
    return {
        "enrollmentToken": issued.token,
        "tokenPrefix": issued.prefix,
        "expiresAt": issued.expires_at.isoformat(),
    }


@router.get("")
async def list_tokens(ctx: WorkspaceDep, session: SessionDep) -> dict[str, Any]:
    ctx.require("admin")
    now = datetime.now(UTC)
    return {
        "enrollmentTokens": [
            {
                "tokenPrefix": t.token_prefix,
                "displayName": t.display_name,
                "state": service.token_state(t, now),
                "createdAt": t.created_at.isoformat(),
                "expiresAt": t.expires_at.isoformat(),
                "claimedAt": t.claimed_at.isoformat() if t.claimed_at else None,
                "claimedByHostId": host_id,
            }
            for t, host_id in await service.list_tokens(session, ctx.workspace_id)
        ]
    }


@router.delete("/{token_prefix}")
async def revoke(token_prefix: str, ctx: WorkspaceDep, session: SessionDep) -> dict[str, Any]:
    ctx.require("admin")
    token = await service.revoke(session, ctx.workspace_id, token_prefix)
    return {
        "tokenPrefix": token.token_prefix,
        "state": service.token_state(token, datetime.now(UTC)),
    }
