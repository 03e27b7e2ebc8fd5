"""Workspaces, members and settings; every query starts from a workspace id."""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from board.auth import tokens
from board.auth.passwords import hash_password
from board.errors import Conflict, NotFound, Unprocessable
from board.workspaces.models import ROLES, ApiToken, Membership, User, Workspace

_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")


async def create_workspace(session: AsyncSession, slug: str, name: str | None) -> Workspace:
    if not _SLUG.match(slug):
        raise Unprocessable(
            "A workspace slug is 1-63 lowercase letters, digits or dashes, starting with a "
            "letter or digit."
        )
    if await session.scalar(select(Workspace.id).where(Workspace.slug == slug)) is not None:
        raise Conflict(f"Workspace {slug!r} already exists.")
    workspace = Workspace(slug=slug, name=name or slug)
    session.add(workspace)
    await session.flush()
    return workspace


async def get_workspace(session: AsyncSession, slug: str) -> Workspace:
    workspace = await session.scalar(select(Workspace).where(Workspace.slug == slug))
    if workspace is None:
        raise NotFound(f"No workspace {slug!r}.")
    return workspace


@dataclass(frozen=True)
class NewMember:
    user: User
    role: str
    api_token: str


async def add_member(
    session: AsyncSession,
    workspace: Workspace,
    email: str,
    role: str,
    password: str | None,
) -> NewMember:
    """Create (or reuse) the person, give them the role here, and a new personal API token."""
    email = email.strip().lower()
    if not _EMAIL.match(email):
        raise Unprocessable(f"{email!r} is not an email address.")
    if role not in ROLES:
        raise Unprocessable(f"Role must be one of {', '.join(ROLES)}.")
    if password is not None and len(password) < 8:
        raise Unprocessable("A password must be at least 8 characters.")
    user = await session.scalar(select(User).where(User.email == email))
    if user is None:
        user = User(email=email)
        session.add(user)
        await session.flush()
    if password is not None:
        user.password_hash = hash_password(password)
    membership = await session.get(Membership, (workspace.id, user.id))
    if membership is None:
        session.add(Membership(workspace_id=workspace.id, user_id=user.id, role=role))
    else:
        membership.role = role
    await session.flush()
    token = await issue_api_token(session, workspace.id, user.id)
    return NewMember(user=user, role=role, api_token=token)


async def issue_api_token(session: AsyncSession, workspace_id: int, user_id: int) -> str:
    issued = tokens.issue(tokens.PAT)
    session.add(
        ApiToken(
            workspace_id=workspace_id,
            user_id=user_id,
            token_hash=issued.digest,
            token_prefix=issued.prefix,
        )
    )
    await session.flush()
    return issued.secret


async def list_members(session: AsyncSession, workspace_id: int) -> list[tuple[User, str]]:
    rows = await session.execute(
        select(User, Membership.role)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.workspace_id == workspace_id)
        .order_by(User.email)
    )
    return [(u, r) for u, r in rows.all()]


SETTING_LIMITS = {
    "maxSampleGapSeconds": ("max_sample_gap_seconds", 1, 86400),
    "staleAfterSeconds": ("stale_after_seconds", 1, 86400),
    "retentionDays": ("retention_days", 1, 3650),
    "maxGpusPerHost": ("max_gpus_per_host", 1, 4096),
}


def settings_of(workspace: Workspace) -> dict[str, object]:
    return {
        "maxSampleGapSeconds": workspace.max_sample_gap_seconds,
        "staleAfterSeconds": workspace.stale_after_seconds,
        "timezone": workspace.timezone,
        "retentionDays": workspace.retention_days,
        "maxGpusPerHost": workspace.max_gpus_per_host,
    }


def update_settings(workspace: Workspace, changes: dict[str, object]) -> None:
    """Validate every change first, then apply them all (nothing half-applied)."""
    unknown = set(changes) - set(SETTING_LIMITS) - {"timezone"}
    if unknown:
        raise Unprocessable(f"Unknown setting(s): {', '.join(sorted(unknown))}.")
    for key, value in changes.items():
        if key == "timezone":
            if not isinstance(value, str) or not valid_zone(value):
                raise Unprocessable(f"timezone {value!r} is not an IANA time zone.")
            continue
        _, low, high = SETTING_LIMITS[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise Unprocessable(f"{key} must be a whole number from {low} to {high}.")
    for key, value in changes.items():
        if key == "timezone":
            workspace.timezone = str(value)
        else:
            setattr(workspace, SETTING_LIMITS[key][0], value)


def valid_zone(name: str) -> bool:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True
