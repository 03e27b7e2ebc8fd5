"""Routes: from a global secret or public id to the one workspace it belongs to.

A lookup that knows no workspace yet (an agent's or an API bearer token, an enrollment
claim, a calendar feed URL, a workspace's slug) reads its workspace here first, then
reads the tenant table with `workspace_id = …` in its WHERE: on a cluster distributed by
`workspace_id` (docs/operations.md, "Past one database: Citus") both are one-shard reads.
The route is written in the transaction that writes the row it routes and dropped in the
one that revokes, rotates or deletes it, so a route exists exactly while its key may be
used; its primary key (kind, key) is what keeps a secret or slug unique across
workspaces. Keys are bytes: a token's SHA-256, or a slug's UTF-8.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from board.db.connection import report_connection
from board.errors import Conflict

AGENT_TOKEN: Final = "agent_token"
API_TOKEN: Final = "api_token"
ENROLLMENT_TOKEN: Final = "enrollment_token"
CALENDAR_FEED_TOKEN: Final = "calendar_feed_token"
WORKSPACE_SLUG: Final = "workspace_slug"
KINDS: Final = (AGENT_TOKEN, API_TOKEN, ENROLLMENT_TOKEN, CALENDAR_FEED_TOKEN, WORKSPACE_SLUG)

_READ = "SELECT workspace_id FROM routing_keys WHERE kind = %s AND key = %s"


async def workspace_of(conn: psycopg.AsyncConnection[Any], kind: str, key: bytes) -> int | None:
    """The workspace the key routes to; None when it routes nowhere (unknown, revoked)."""
    cur = await conn.execute(_READ, [kind, key])
    row = await cur.fetchone()
    return int(row[0]) if row else None


async def add(conn: psycopg.AsyncConnection[Any], kind: str, key: bytes, workspace_id: int) -> None:
    """Route the key to the workspace; a key routed already (anywhere) is a 409."""
    cur = await conn.execute(
        "INSERT INTO routing_keys (kind, key, workspace_id) VALUES (%s, %s, %s) "
        "ON CONFLICT (kind, key) DO NOTHING RETURNING 1",
        [kind, key, workspace_id],
    )
    if await cur.fetchone() is None:
        raise Conflict(f"This {kind.replace('_', ' ')} is taken already.")


async def drop(
    conn: psycopg.AsyncConnection[Any], kind: str, keys: Sequence[bytes], workspace_id: int
) -> None:
    """Route these keys nowhere any more (only this workspace's own routes)."""
    if keys:
        await conn.execute(
            "DELETE FROM routing_keys WHERE kind = %s AND key = ANY(%s) AND workspace_id = %s",
            [kind, list(keys), workspace_id],
        )


# The same, in an ORM session's transaction.
async def session_workspace_of(session: AsyncSession, kind: str, key: bytes) -> int | None:
    return await workspace_of(await report_connection(session), kind, key)


async def session_add(session: AsyncSession, kind: str, key: bytes, workspace_id: int) -> None:
    await add(await report_connection(session), kind, key, workspace_id)


async def session_drop(
    session: AsyncSession, kind: str, keys: Sequence[bytes], workspace_id: int
) -> None:
    await drop(await report_connection(session), kind, keys, workspace_id)


def slug_key(slug: str) -> bytes:
    """A slug's route key; any string (a hostile URL's too) encodes, and a key no slug
    has routes nowhere."""
    return slug.encode("utf-8", "surrogatepass")
