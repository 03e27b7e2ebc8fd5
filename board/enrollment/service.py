"""Enrollment tokens: issued by an admin, claimed exactly once by a host's agent."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from pydantic import ValidationError
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from board.auth import routing, tokens
from board.enrollment.models import EnrollmentToken
from board.enrollment.schemas import (
    ClaimRequest,
    ClaimResponse,
    EnrollmentTokenOut,
    IssuedEnrollment,
    RevokedEnrollment,
    TokenState,
)
from board.errors import NotFound, Unauthorized, Unprocessable
from board.hosts.models import Host
from board.ingest.service import invalid
from board.jsonbodies import TOO_WIDE_DETAIL, has_too_wide_object

_REFUSED = "This enrollment token is not valid: it is unknown, expired, revoked or already used."


async def issue(
    session: AsyncSession,
    workspace_id: int,
    *,
    display_name: str | None,
    expires_in_hours: float,
) -> IssuedEnrollment:
    if not 0 < expires_in_hours <= 24 * 30:
        raise Unprocessable("expiresInHours must be more than 0 and at most 720 (30 days).")
    # The page's form and the API both land here; PostgreSQL text cannot hold a NUL.
    if display_name is not None and "\x00" in display_name:
        raise Unprocessable("displayName must not contain NUL (\\u0000) characters.")
    issued = tokens.issue(tokens.ENROLL)
    expires_at = datetime.now(UTC) + timedelta(hours=expires_in_hours)
    session.add(
        EnrollmentToken(
            workspace_id=workspace_id,
            token_hash=issued.digest,
            token_prefix=issued.prefix,
            display_name=(display_name or None),
            expires_at=expires_at,
        )
    )
    await session.flush()
    await routing.session_add(session, routing.ENROLLMENT_TOKEN, issued.digest, workspace_id)
    return IssuedEnrollment(token=issued.secret, prefix=issued.prefix, expires_at=expires_at)


def _state(token: EnrollmentToken, now: datetime) -> TokenState:
    if token.claimed_at is not None:
        return "claimed"
    if token.revoked_at is not None:
        return "revoked"
    if token.expires_at <= now:
        return "expired"
    return "active"


async def list_tokens(session: AsyncSession, workspace_id: int) -> list[EnrollmentTokenOut]:
    """Newest first, with the public id of the host that claimed each (never a secret)."""
    rows = await session.execute(
        select(EnrollmentToken, Host.public_id)
        .outerjoin(
            Host,
            (Host.workspace_id == EnrollmentToken.workspace_id)
            & (Host.id == EnrollmentToken.claimed_host_id),
        )
        .where(EnrollmentToken.workspace_id == workspace_id)
        .order_by(EnrollmentToken.created_at.desc(), EnrollmentToken.id.desc())
    )
    now = datetime.now(UTC)
    return [
        EnrollmentTokenOut(
            token_prefix=token.token_prefix,
            display_name=token.display_name,
            state=_state(token, now),
            created_at=token.created_at,
            expires_at=token.expires_at,
            claimed_at=token.claimed_at,
            claimed_by_host_id=str(host_id) if host_id else None,
        )
        for token, host_id in rows.all()
    ]


async def revoke(session: AsyncSession, workspace_id: int, token_prefix: str) -> RevokedEnrollment:
    token = await session.scalar(
        select(EnrollmentToken).where(
            EnrollmentToken.workspace_id == workspace_id,
            EnrollmentToken.token_prefix == token_prefix,
        )
    )
    if token is None:
        raise NotFound("No enrollment token with this prefix in this workspace.")
    if token.claimed_at is None and token.revoked_at is None:
        token.revoked_at = datetime.now(UTC)
    await routing.session_drop(session, routing.ENROLLMENT_TOKEN, [token.token_hash], workspace_id)
    return RevokedEnrollment(
        token_prefix=token.token_prefix, state=_state(token, datetime.now(UTC))
    )


def _display_name(preset: str | None, hostname: str | None, prefix: str) -> str:
    for candidate in (preset, hostname):
        if candidate and candidate.strip():
            return candidate.strip()[:255]
    return f"host-{prefix[-8:]}"


async def claim(session: AsyncSession, body: bytes) -> ClaimResponse:
    if has_too_wide_object(body):
        raise Unprocessable(TOO_WIDE_DETAIL)
    try:
        request = ClaimRequest.model_validate_json(body)
    except ValidationError as exc:
        raise invalid(exc) from None

    # One UPDATE decides the winner: of many concurrent claims exactly one matches the row
    # while claimed_at is still null; the others re-check after its commit and match nothing.
    # Routed: the claim names no workspace, the token's route does (board.auth.routing).
    digest = tokens.digest(request.enrollment_token.strip())
    routed = await routing.session_workspace_of(session, routing.ENROLLMENT_TOKEN, digest)
    if routed is None:
        raise Unauthorized(_REFUSED)
    now = datetime.now(UTC)
    claimed = (
        await session.execute(
            update(EnrollmentToken)
            .where(
                EnrollmentToken.workspace_id == routed,
                EnrollmentToken.token_hash == digest,
                EnrollmentToken.claimed_at.is_(None),
                EnrollmentToken.revoked_at.is_(None),
                EnrollmentToken.expires_at > now,
            )
            .values(claimed_at=now)
            .returning(
                EnrollmentToken.workspace_id,
                EnrollmentToken.id,
                EnrollmentToken.display_name,
                EnrollmentToken.token_prefix,
            )
        )
    ).one_or_none()
    if claimed is None:
        raise Unauthorized(_REFUSED)
    workspace_id, token_id, preset_name, prefix = claimed

    agent_token = tokens.issue(tokens.AGENT)
    host = Host(
        workspace_id=workspace_id,
        public_id=uuid.uuid4(),
        display_name=_display_name(preset_name, request.hostname, agent_token.prefix),
        hostname=request.hostname or None,
        agent_version=request.agent_version or None,
        driver_version=request.driver_version or None,
        agent_token_hash=agent_token.digest,
        agent_token_prefix=agent_token.prefix,
    )
    session.add(host)
    await session.flush()
    # Used once: the enrollment token routes nowhere now, the new agent token to its host.
    await routing.session_drop(session, routing.ENROLLMENT_TOKEN, [digest], workspace_id)
    await routing.session_add(session, routing.AGENT_TOKEN, agent_token.digest, workspace_id)
    await session.execute(
        update(EnrollmentToken)
        .where(EnrollmentToken.workspace_id == workspace_id, EnrollmentToken.id == token_id)
        .values(claimed_host_id=host.id)
    )
    return ClaimResponse(
        host_id=str(host.public_id),
        display_name=host.display_name,
        agent_token=agent_token.secret,
        token_prefix=agent_token.prefix,
    )
