"""Write and read the audit log.

How to record an admin action (the stable entry point for every domain)::

    from board.audit.service import record

    await record(session, ctx, "member.added", target=email, detail={"role": role})

``record(session, ctx, action, *, target=None, detail=None, address=None) -> None``

- ``session``: the request's AsyncSession. The row is only added to it, so it is written
  in the same transaction as the action and vanishes with it if the action fails.
- ``ctx``: the acting admin's ``WorkspaceContext`` (board.auth.deps): workspace, user id,
  email and the client address are taken from it. The request's dependencies build it
  with the address, so no entry can lack one.
- ``action``: ``"<thing>.<what happened>"`` in lower case, e.g. ``"host.revoked"``.
- ``target``: what was acted on, in words an admin recognises (an email, a token
  prefix, a host id); never a secret.
- ``detail``: a few scalar values (str, int, float, bool, None). Keys that name a
  password or secret, or a token other than its public prefix, are dropped, and so is
  any value that looks like a board token: the log never holds one.
- ``address``: needless: ``ctx.client_address`` is used when it is not given (routes
  written before the context carried it still pass ``ClientAddressDep``'s, the same value).

Sign-ins belong to a person, not a workspace: ``record_for_person`` writes one row in each
workspace the person belongs to, so each of their admins sees it and no other.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from board.audit.models import AuditEvent
from board.audit.schemas import AuditEventOut, DetailValue
from board.auth.deps import WorkspaceContext
from board.auth.models import Membership

log = logging.getLogger(__name__)

MAX_DETAIL_KEYS = 20
MAX_TEXT = 200
# A board secret: kind, public id, then the random part (board.auth.tokens).
_SECRET_VALUE = re.compile(r"gua_[a-z]+_[0-9a-f]{8}_")
_SECRET_KEY = re.compile(r"password|secret|credential|verifier", re.IGNORECASE)


def _clean_text(value: str | None) -> str | None:
    if value is None:
        return None
    value = "".join(c for c in value if c.isprintable())[:MAX_TEXT]
    return "[redacted]" if _SECRET_VALUE.search(value) else value


def _safe_key(key: str) -> bool:
    if _SECRET_KEY.search(key):
        return False
    # A token's public prefix names it safely; anything else about a token does not.
    lowered = key.lower()
    return "token" not in lowered or lowered.endswith("prefix")


def clean_detail(detail: Mapping[str, object] | None) -> dict[str, DetailValue]:
    """At most a few scalar values, never a secret (see the module docstring)."""
    cleaned: dict[str, DetailValue] = {}
    for key, value in (detail or {}).items():
        if len(cleaned) >= MAX_DETAIL_KEYS or not _safe_key(key):
            continue
        if isinstance(value, str):
            cleaned[key[:64]] = _clean_text(value)
        elif value is None or isinstance(value, bool | int | float):
            cleaned[key[:64]] = value
    return cleaned


async def record(
    session: AsyncSession,
    ctx: WorkspaceContext,
    action: str,
    *,
    target: str | None = None,
    detail: Mapping[str, object] | None = None,
    address: str | None = None,
) -> None:
    """One admin action in the acting admin's workspace (same transaction as the action)."""
    record_event(
        session,
        ctx.workspace_id,
        action,
        user_id=ctx.user_id,
        email=ctx.email,
        target=target,
        detail=detail,
        address=address if address is not None else ctx.client_address,
    )


def record_event(
    session: AsyncSession,
    workspace_id: int,
    action: str,
    *,
    user_id: int | None,
    email: str | None,
    target: str | None = None,
    detail: Mapping[str, object] | None = None,
    address: str | None = None,
) -> None:
    """The general form of `record`, for events without an admin's context."""
    session.add(
        AuditEvent(
            workspace_id=workspace_id,
            actor_user_id=user_id,
            actor_email=_clean_text(email),
            action=action,
            target=_clean_text(target),
            detail=clean_detail(detail),
            client_address=_clean_text(address),
        )
    )


async def record_for_person(
    session: AsyncSession,
    action: str,
    *,
    user_id: int | None,
    email: str,
    address: str | None,
    detail: Mapping[str, object] | None = None,
) -> int:
    """An event of a person (a sign-in), in each of their workspaces; how many rows.

    An attempt on an email with no account belongs to no workspace: it goes to the log
    only (no admin should learn which addresses strangers try).
    """
    if user_id is None:
        log.info("audit: %s for an unknown account from %s", action, address)
        return 0
    workspace_ids = (
        await session.scalars(select(Membership.workspace_id).where(Membership.user_id == user_id))
    ).all()
    for workspace_id in workspace_ids:
        record_event(
            session,
            workspace_id,
            action,
            user_id=user_id,
            email=email,
            target=email,
            detail=detail,
            address=address,
        )
    return len(workspace_ids)


# Event ids are PostgreSQL bigints: a cursor past the largest is no page's (and a 500).
MAX_CURSOR = 2**63 - 1


def parse_cursor(cursor: str) -> int | None:
    """A previous page's nextCursor as an event id, or None for anything else."""
    if not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 19):
        return None
    value = int(cursor)
    return value if value <= MAX_CURSOR else None


@dataclass(frozen=True)
class AuditQuery:
    """A bounded read: a time range, a page size, and where the previous page ended."""

    since: datetime | None = None
    until: datetime | None = None
    limit: int = 100
    before_id: int | None = None


async def list_events(
    session: AsyncSession, workspace_id: int, query: AuditQuery
) -> tuple[list[AuditEventOut], str | None]:
    """The workspace's events, newest first, and the cursor of the next page (or None)."""
    statement = select(AuditEvent).where(AuditEvent.workspace_id == workspace_id)
    if query.since is not None:
        statement = statement.where(AuditEvent.at >= query.since)
    if query.until is not None:
        statement = statement.where(AuditEvent.at < query.until)
    if query.before_id is not None:
        statement = statement.where(AuditEvent.id < query.before_id)
    rows = list(
        await session.scalars(statement.order_by(AuditEvent.id.desc()).limit(query.limit + 1))
    )
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    events = [AuditEventOut.model_validate(row) for row in rows]
    return events, (str(rows[-1].id) if more and rows else None)


async def delete_expired(
    conn: psycopg.AsyncConnection[Any], *, min_days: int, now: datetime | None = None
) -> int:
    """Events older than their workspace's retention_days, and never younger than
    `min_days` (the operator's floor), go: an admin cannot erase the trail by setting
    retentionDays=1."""
    cur = await conn.execute(
        """
        DELETE FROM audit_events a
        USING workspaces w
        WHERE a.workspace_id = w.id
          AND a.at < %(now)s - make_interval(days => GREATEST(w.retention_days, %(floor)s))
        """,
        {"now": now or datetime.now(UTC), "floor": min_days},
    )
    if cur.rowcount:
        log.info("audit retention: deleted %d events", cur.rowcount)
    return cur.rowcount
