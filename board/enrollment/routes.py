"""Enrollment tokens for admins (issue, shown once; list; revoke) and the agent's claim."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request

from board.audit.deps import ClientAddressDep
from board.audit.service import record
from board.auth.deps import AdminDep
from board.db.deps import SessionDep
from board.edge import read_body
from board.enrollment import service
from board.enrollment.schemas import (
    ClaimRequest,
    ClaimResponse,
    EnrollmentTokenList,
    IssuedEnrollment,
    IssueRequest,
    RevokedEnrollment,
)
from board.errors import answers
from board.ingest.service import require_json
from board.settings import SettingsDep

# No router prefix: the admins' routes and the agent's claim live under different ones.
router = APIRouter()
TOKENS = "/api/v1/workspaces/{slug}/enrollment-tokens"
# A claim is a few short strings; anything much larger is not one.
CLAIM_MAX_BYTES = 64 * 1024


@router.post(
    TOKENS,
    status_code=201,
    response_model=IssuedEnrollment,
    tags=["enrollment"],
    summary="Issue an enrollment token",
)
async def issue(
    ctx: AdminDep,
    session: SessionDep,
    settings: SettingsDep,
    address: ClientAddressDep,
    request: Annotated[IssueRequest | None, Body()] = None,
) -> IssuedEnrollment:
    request = request or IssueRequest()
    issued = await service.issue(
        session,
        ctx.workspace_id,
        display_name=request.display_name,
        expires_in_hours=request.expires_in_hours or settings.enrollment_token_ttl_hours,
    )
    detail = {"displayName": request.display_name}
    await record(
        session,
        ctx,
        "enrollment_token.issued",
        target=issued.prefix,
        detail=detail,
        address=address,
    )
    return issued


@router.get(
    TOKENS,
    response_model=EnrollmentTokenList,
    tags=["enrollment"],
    summary="List enrollment tokens",
)
async def list_tokens(ctx: AdminDep, session: SessionDep) -> EnrollmentTokenList:
    return EnrollmentTokenList(
        enrollment_tokens=await service.list_tokens(session, ctx.workspace_id)
    )


@router.delete(
    TOKENS + "/{token_prefix}",
    response_model=RevokedEnrollment,
    tags=["enrollment"],
    summary="Revoke an enrollment token",
)
async def revoke(
    token_prefix: str, ctx: AdminDep, session: SessionDep, address: ClientAddressDep
) -> RevokedEnrollment:
    revoked = await service.revoke(session, ctx.workspace_id, token_prefix)
    await record(session, ctx, "enrollment_token.revoked", target=token_prefix, address=address)
    return revoked


@router.post(
    "/agent/v1/enrollments/claim",
    status_code=201,
    response_model=ClaimResponse,
    tags=["agent"],
    summary="Enroll a host: trade an enrollment token for an agent token",
    responses=answers(
        401,
        415,
        meaning={401: "The enrollment token is unknown, expired, revoked or already used."},
    ),
    # The body is read by hand (bounded before parsing), so /docs learns its shape here.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ClaimRequest.model_json_schema()}},
        }
    },
)
async def claim(request: Request, session: SessionDep) -> ClaimResponse:
    """The agent trades a one-time enrollment token for its own agent token (shown once).

    As on every agent route, the body must be JSON and is bounded before it is parsed.
    """
    require_json(request.headers.get("content-type"))
    body = await read_body(request, CLAIM_MAX_BYTES)
    return await service.claim(session, body)
