"""Workspace settings and members; the caller's own API tokens (`/api/v1/me`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Body, Response
from fastapi import Path as PathParam
from starlette.convertors import Convertor, register_url_convertor

from board.audit.deps import ClientAddressDep
from board.audit.service import record
from board.auth import web_sessions
from board.auth.deps import AdminDep, PasswordGateDep, ReaderDep, TokenDep
from board.db.deps import SessionDep
from board.errors import answers
from board.workspaces import service
from board.workspaces.schemas import (
    AddedMember,
    IssueApiTokenRequest,
    IssuedApiToken,
    MemberList,
    MemberRequest,
    MyApiTokens,
    SettingsPatch,
    WorkspaceSettings,
)


class MemberEmail(Convertor[str]):
    """A member's email in a path, taken whole (an email may hold a "/"), never ending in
    "/sign-out": that is the sign-out route's path (no email ends so: its domain follows
    the "@"), so DELETE …/members/x/sign-out is a 405 rather than a removal of
    "x/sign-out", as the OpenAPI says."""

    regex = ".*(?<!/sign-out)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("member_email", MemberEmail())

router = APIRouter(prefix="/api/v1/workspaces/{slug}", tags=["workspaces"])
me_router = APIRouter(prefix="/api/v1/me", tags=["me"])


@router.get("/settings", response_model=WorkspaceSettings, summary="Workspace settings")
async def get_settings(ctx: ReaderDep) -> WorkspaceSettings:
    return service.settings_of(ctx.workspace)


@router.patch(
    "/settings",
    response_model=WorkspaceSettings,
    summary="Change workspace settings",
    responses=answers(
        409,
        meaning={
            409: "maxSampleGapSeconds keeps too many dated values, or its new date reaches "
            "hours whose raw samples are gone."
        },
    ),
)
async def patch_settings(
    ctx: AdminDep, session: SessionDep, patch: SettingsPatch, address: ClientAddressDep
) -> WorkspaceSettings:
    workspace = await session.merge(ctx.workspace)
    changed = await service.update_settings(session, workspace, patch)
    await record(session, ctx, "settings.changed", detail=changed, address=address)
    await session.flush()
    return service.settings_of(workspace)


@router.get("/members", response_model=MemberList, summary="List members")
async def list_members(ctx: AdminDep, session: SessionDep) -> MemberList:
    return MemberList(members=await service.list_members(session, ctx.workspace_id))


@router.post(
    "/members",
    status_code=201,
    response_model=AddedMember,
    summary="Add a member, or change a member's role",
    responses=answers(409, meaning={409: "That would leave the workspace without an admin."}),
)
async def add_member(
    ctx: AdminDep,
    session: SessionDep,
    gate: PasswordGateDep,
    body: MemberRequest,
    address: ClientAddressDep,
) -> AddedMember:
    workspace = await session.merge(ctx.workspace)
    member = await service.add_member(
        session, workspace, body.email, body.role, body.password, gate.hash
    )
    action, target, detail = member.audited()
    await record(session, ctx, action, target=target, detail=detail, address=address)
    return member.shown()


@router.delete(
    "/members/{email:member_email}",
    status_code=204,
    response_class=Response,
    summary="Remove a member",
    responses=answers(409, meaning={409: "That would leave the workspace without an admin."}),
)
async def remove_member(
    email: str, ctx: AdminDep, session: SessionDep, address: ClientAddressDep
) -> Response:
    """The membership and its API tokens end at once; so do the person's web sessions
    when this was their last workspace (pages check the membership on every request)."""
    user_id = await service.remove_member(session, ctx.workspace_id, email)
    await record(session, ctx, "member.removed", target=email.strip().lower(), address=address)
    if not await service.has_memberships(session, user_id):
        await web_sessions.end_all(session, user_id)
    return Response(status_code=204)


@router.post(
    "/members/{email:path}/sign-out",
    status_code=204,
    response_class=Response,
    summary="Sign a member out of every browser",
)
async def sign_out_member(
    email: str, ctx: AdminDep, session: SessionDep, address: ClientAddressDep
) -> Response:
    """Sign the member out of every browser (their API tokens are not touched)."""
    membership = await service.find_member(session, ctx.workspace_id, email)
    await service.ensure_may_end_all_sessions(session, ctx.user_id, membership.user_id)
    ended = await web_sessions.end_all(session, membership.user_id)
    target = email.strip().lower()
    await record(
        session,
        ctx,
        "member.signed_out",
        target=target,
        detail={"sessions": ended},
        address=address,
    )
    return Response(status_code=204)


@me_router.get("/api-tokens", response_model=MyApiTokens, summary="Your API tokens")
async def my_tokens(ctx: TokenDep, session: SessionDep) -> MyApiTokens:
    """The caller's personal API tokens in the token's workspace; never a secret."""
    found = await service.list_api_tokens(session, ctx.workspace_id, ctx.user_id)
    return MyApiTokens(workspace=ctx.workspace.slug, api_tokens=found)


@me_router.post(
    "/api-tokens",
    status_code=201,
    response_model=IssuedApiToken,
    summary="Issue another API token",
    responses=answers(409, meaning={409: "You have as many API tokens as you may."}),
)
async def issue_my_token(
    ctx: TokenDep,
    session: SessionDep,
    address: ClientAddressDep,
    body: Annotated[IssueApiTokenRequest | None, Body()] = None,
) -> IssuedApiToken:
    """Another token for the same membership (rotate: issue, switch, revoke the old one).

    Optional `name` and `expiresInDays`; the secret is in this answer only.
    """
    body = body or IssueApiTokenRequest()
    expires_at = None
    if body.expires_in_days is not None:
        expires_at = datetime.now(UTC) + timedelta(days=body.expires_in_days)
    issued = await service.issue_api_token(
        session, ctx.workspace_id, ctx.user_id, name=body.name, expires_at=expires_at
    )
    await record(
        session,
        ctx,
        "api_token.issued",
        target=issued.prefix,
        detail={"name": body.name, "expiresInDays": body.expires_in_days},
        address=address,
    )
    return IssuedApiToken(
        api_token=issued.secret,
        token_prefix=issued.prefix,
        workspace=ctx.workspace.slug,
        role=ctx.role,
        name=body.name,
        expires_at=expires_at,
    )


@me_router.delete(
    "/api-tokens/{token_prefix}",
    status_code=204,
    response_class=Response,
    summary="Revoke one of your API tokens",
    responses=answers(404, meaning={404: "No such API token of yours."}),
)
async def revoke_my_token(
    token_prefix: Annotated[str, PathParam(max_length=64)],
    ctx: TokenDep,
    session: SessionDep,
    address: ClientAddressDep,
) -> Response:
    """Revoked at once in every board process: each request looks its token up afresh."""
    await service.revoke_api_token(session, ctx.workspace_id, ctx.user_id, token_prefix)
    await record(session, ctx, "api_token.revoked", target=token_prefix, address=address)
    return Response(status_code=204)
