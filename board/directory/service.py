"""The directory: Linux users seen on the hosts, and who and which team each one is.

"Seen" costs the ingest path nothing: every Linux user holding a GPU is credited in
user_hour_rollups already, so the first and last hour it appears there are its
firstSeenAt and lastSeenAt (hour precision; a user appears once an interval it held a
GPU in is closed by the next observation).
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from board.audit.service import record
from board.auth.deps import WorkspaceContext
from board.db.connection import report_connection
from board.directory.schemas import LINUX_USER_PATTERN, DirectoryEntryIn, DirectoryEntryOut
from board.errors import NotFound, Unprocessable
from board.rollups.crediting import UNKNOWN_USER

_NAME = re.compile(LINUX_USER_PATTERN)

_ENTRIES = """
    WITH seen AS (
        SELECT linux_user, min(hour_start) AS first_at, max(hour_start) AS last_at
        FROM user_hour_rollups WHERE workspace_id = %(ws)s AND held_us > 0
          AND linux_user <> %(unknown)s  -- a held card naming no process: nobody's account
        GROUP BY linux_user
    ), entered AS (
        SELECT linux_user, user_id, team FROM directory_entries WHERE workspace_id = %(ws)s
    )
    SELECT coalesce(d.linux_user, s.linux_user), u.email, d.team, s.first_at, s.last_at
    FROM entered d
    FULL JOIN seen s ON s.linux_user = d.linux_user
    LEFT JOIN users u ON u.id = d.user_id
    ORDER BY 1
"""


async def entries(session: AsyncSession, workspace_id: int) -> list[DirectoryEntryOut]:
    conn = await report_connection(session)
    cur = await conn.execute(_ENTRIES, {"ws": workspace_id, "unknown": UNKNOWN_USER})
    return [
        DirectoryEntryOut(
            linux_user=user, member_email=email, team=team, first_seen_at=first, last_seen_at=last
        )
        for user, email, team, first, last in await cur.fetchall()
    ]


def check_linux_user(name: str) -> str:
    if not _NAME.fullmatch(name):  # match() lets "$" pass a trailing newline
        raise Unprocessable(
            f"{name[:80]!r} is not a Linux user name (letters, digits, '.', '_', '-', "
            "at most 64 characters)."
        )
    if name == UNKNOWN_USER:
        # Linked to a member, a card held with no process named would count as that
        # member's own use of their bookings (used, not conflict).
        raise Unprocessable(
            f"{UNKNOWN_USER!r} is the board's placeholder for a held card that names no "
            "process; it is nobody's account."
        )
    return name


async def put_entry(
    session: AsyncSession, ctx: WorkspaceContext, linux_user: str, body: DirectoryEntryIn
) -> DirectoryEntryOut:
    """Link a Linux user to a member and a team (null unlinks); entered ahead if unseen."""
    check_linux_user(linux_user)
    conn = await report_connection(session)
    user_id: Any = None
    if body.member_email is not None:
        cur = await conn.execute(
            "SELECT u.id FROM memberships m JOIN users u ON u.id = m.user_id "
            "WHERE m.workspace_id = %s AND u.email = %s",
            [ctx.workspace_id, body.member_email.strip().lower()],
        )
        row = await cur.fetchone()
        if row is None:
            raise Unprocessable(f"{body.member_email[:320]!r} is not a member of this workspace.")
        user_id = row[0]
    await conn.execute(
        """
        INSERT INTO directory_entries (workspace_id, linux_user, user_id, team)
        VALUES (%s, %s, %s, %s)
        ON CONFLICT (workspace_id, linux_user) DO UPDATE
        SET user_id = EXCLUDED.user_id, team = EXCLUDED.team, updated_at = now()
        """,
        [ctx.workspace_id, linux_user, user_id, body.team],
    )
    await record(
        session,
        ctx,
        "directory.put",
        target=linux_user,
        detail={"memberEmail": body.member_email, "team": body.team},
    )
    for entry in await entries(session, ctx.workspace_id):
        if entry.linux_user == linux_user:
            return entry
    raise NotFound("No such directory entry.")  # not reached: it was just written
