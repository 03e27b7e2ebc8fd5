"""A member's secret calendar feed URL, for calendar apps that cannot send a bearer header.

The URL carries a token in its query (`?token=`), never in its path, so the access log
(which writes paths only) never holds it. Only its SHA-256 is stored; it is shown once,
one per member and workspace (a new one replaces the old), revocable, and it stops
working when its member leaves the workspace, for good: adding them again does not bring
it back. It reads what the member could read with the API: the workspace's bookings, and
nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from board.audit.service import record
from board.auth import routing, tokens
from board.auth.deps import WorkspaceContext
from board.db.connection import report_connection
from board.errors import NotFound

KIND = "gua_cal_"
FEED_PATH = "/api/v1/calendar/reservations.ics"
MAX_TOKEN_CHARS = 128


@dataclass(frozen=True)
class FeedOwner:
    workspace_id: int
    slug: str


async def issue(session: AsyncSession, ctx: WorkspaceContext) -> tokens.IssuedToken:
    """A new feed token for the caller in this workspace; the previous one stops working."""
    issued = tokens.issue(KIND)
    conn = await report_connection(session)
    # The membership's row is locked until commit, so two issues for one member take
    # turns: each sees the token it replaces, and drops that one's route.
    await conn.execute(
        "SELECT 1 FROM memberships WHERE workspace_id = %s AND user_id = %s FOR UPDATE",
        [ctx.workspace_id, ctx.user_id],
    )
    cur = await conn.execute(
        "SELECT token_hash FROM calendar_feed_tokens WHERE workspace_id = %s AND user_id = %s",
        [ctx.workspace_id, ctx.user_id],
    )
    replaced = [bytes(row[0]) for row in await cur.fetchall()]
    await routing.drop(conn, routing.CALENDAR_FEED_TOKEN, replaced, ctx.workspace_id)
    await conn.execute(
        """
        INSERT INTO calendar_feed_tokens (workspace_id, user_id, token_hash, token_prefix)
        VALUES (%s, %s, %s, %s)
        ON CONFLICT (workspace_id, user_id) DO UPDATE
        SET token_hash = EXCLUDED.token_hash, token_prefix = EXCLUDED.token_prefix,
            created_at = now()
        """,
        [ctx.workspace_id, ctx.user_id, issued.digest, issued.prefix],
    )
    await routing.add(conn, routing.CALENDAR_FEED_TOKEN, issued.digest, ctx.workspace_id)
    await record(session, ctx, "calendar_feed.issued", target=issued.prefix)
    return issued


async def revoke(session: AsyncSession, ctx: WorkspaceContext) -> None:
    conn = await report_connection(session)
    cur = await conn.execute(
        "DELETE FROM calendar_feed_tokens WHERE workspace_id = %s AND user_id = %s "
        "RETURNING token_prefix, token_hash",
        [ctx.workspace_id, ctx.user_id],
    )
    row = await cur.fetchone()
    if row is None:
        raise NotFound("You have no calendar feed URL in this workspace.")
    await routing.drop(conn, routing.CALENDAR_FEED_TOKEN, [bytes(row[1])], ctx.workspace_id)
    await record(session, ctx, "calendar_feed.revoked", target=str(row[0]))


async def owner(session: AsyncSession, token: str) -> FeedOwner:
    """The workspace a feed token reads; 404 for anything else (unknown, revoked, a
    member who left), the same answer each time so a guess learns nothing."""
    if not token.startswith(KIND) or len(token) > MAX_TOKEN_CHARS:
        raise NotFound("No such calendar feed.")
    conn = await report_connection(session)
    # Routed: the URL names no workspace, the token's route does (board.auth.routing).
    digest = tokens.digest(token)
    workspace_id = await routing.workspace_of(conn, routing.CALENDAR_FEED_TOKEN, digest)
    if workspace_id is None:
        raise NotFound("No such calendar feed.")
    cur = await conn.execute(
        """
        SELECT w.id, w.slug FROM calendar_feed_tokens t
        JOIN memberships m ON m.workspace_id = t.workspace_id AND m.user_id = t.user_id
        JOIN workspaces w ON w.id = t.workspace_id
        WHERE t.workspace_id = %s AND t.token_hash = %s
          -- issued in this membership, not in one that ended (removed, then added again)
          AND t.created_at >= m.created_at
        """,
        [workspace_id, digest],
    )
    row = await cur.fetchone()
    if row is None:
        raise NotFound("No such calendar feed.")
    return FeedOwner(int(row[0]), str(row[1]))
