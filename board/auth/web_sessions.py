"""Signed-in browser sessions, kept in PostgreSQL so ending one ends it in every process.

The cookie carries a random secret; only its SHA-256 is stored. Signing out deletes the
row; a password change, an admin's "sign out everywhere" and removal from a workspace
delete all of a person's rows.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from board.auth import tokens
from board.auth.models import User, WebSessionRow


@dataclass(frozen=True)
class SessionUser:
    user_id: int
    email: str


async def start(db: AsyncSession, user_id: int, max_age_seconds: int) -> str:
    """A new session for the person; its secret (for the cookie only)."""
    now = datetime.now(UTC)
    # Expired rows of this person go as they sign in again: the table does not grow.
    await db.execute(
        delete(WebSessionRow).where(
            WebSessionRow.user_id == user_id, WebSessionRow.expires_at <= now
        )
    )
    secret = secrets.token_urlsafe(32)
    db.add(
        WebSessionRow(
            token_hash=tokens.digest(secret),
            user_id=user_id,
            expires_at=now + timedelta(seconds=max_age_seconds),
        )
    )
    await db.flush()
    return secret


async def find(db: AsyncSession, secret: str) -> SessionUser | None:
    row = (
        await db.execute(
            select(User.id, User.email)
            .join(WebSessionRow, WebSessionRow.user_id == User.id)
            .where(
                WebSessionRow.token_hash == tokens.digest(secret),
                WebSessionRow.expires_at > datetime.now(UTC),
            )
        )
    ).one_or_none()
    return None if row is None else SessionUser(user_id=row[0], email=row[1])


async def end(db: AsyncSession, secret: str) -> None:
    await db.execute(delete(WebSessionRow).where(WebSessionRow.token_hash == tokens.digest(secret)))


async def end_all(db: AsyncSession, user_id: int) -> int:
    """Every session of the person, in every browser; how many there were."""
    result = await db.execute(
        delete(WebSessionRow).where(WebSessionRow.user_id == user_id).returning(WebSessionRow.id)
    )
    return len(result.all())
