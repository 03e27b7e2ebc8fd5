"""Teams: the labels directory entries carry, and each team's contact address.

A team exists while an entry names it or it has a row of its own (`directory_teams`:
its contact, set ahead or later). Budgets are kept per team name (board/budgets), and
their notices go to the contact given here.
"""

from __future__ import annotations

from typing import Any

import psycopg
from pydantic import TypeAdapter, ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from board.audit.service import record
from board.auth.deps import WorkspaceContext
from board.auth.emails import mailable, plausible_email
from board.db.connection import report_connection
from board.directory.schemas import Team, TeamIn, TeamOut
from board.errors import Unprocessable, describe_validation_errors

_TEAM = TypeAdapter(Team)

_TEAMS = """
    WITH named AS (
        SELECT team, count(*) AS users FROM directory_entries
        WHERE workspace_id = %(ws)s AND team IS NOT NULL GROUP BY team
    ), own AS (
        SELECT team, contact_email FROM directory_teams WHERE workspace_id = %(ws)s
    )
    SELECT coalesce(n.team, o.team), o.contact_email, coalesce(n.users, 0)
    FROM named n FULL JOIN own o ON o.team = n.team
    ORDER BY coalesce(n.team, o.team) COLLATE "C"
"""


def check_team(name: str) -> str:
    """A team name from a URL or a form, checked as the directory's bodies are (422)."""
    try:
        return _TEAM.validate_python(name)
    except ValidationError as exc:
        detail = describe_validation_errors(exc.errors())
        raise Unprocessable(f"team {name[:100]!r}: {detail}") from None


def check_contact(address: str | None) -> str | None:
    """An address mail can go to as written (lower case), or None."""
    if address is None or address.strip() == "":
        return None
    cleaned = address.strip().lower()
    if not (plausible_email(cleaned) and mailable(cleaned)):
        raise Unprocessable(f"contactEmail: {address[:320]!r} is not an email address.")
    return cleaned


async def teams(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> list[TeamOut]:
    """Every team of the workspace, by name."""
    cur = await conn.execute(_TEAMS, {"ws": workspace_id})
    return [
        TeamOut(team=team, contact_email=contact, linux_users=users)
        for team, contact, users in await cur.fetchall()
    ]


async def contacts(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> dict[str, str]:
    """Team -> contact address, for the teams that have one."""
    return {t.team: t.contact_email for t in await teams(conn, workspace_id) if t.contact_email}


async def put_team(
    session: AsyncSession, ctx: WorkspaceContext, name: str, body: TeamIn
) -> TeamOut:
    """Set (or clear, with null) a team's contact; names the team ahead if no entry does."""
    team = check_team(name)
    contact = check_contact(body.contact_email)
    conn = await report_connection(session)
    if contact is None:
        await conn.execute(
            "DELETE FROM directory_teams WHERE workspace_id = %s AND team = %s",
            [ctx.workspace_id, team],
        )
    else:
        await conn.execute(
            """
            INSERT INTO directory_teams (workspace_id, team, contact_email) VALUES (%s, %s, %s)
            ON CONFLICT (workspace_id, team) DO UPDATE
            SET contact_email = EXCLUDED.contact_email, updated_at = now()
            """,
            [ctx.workspace_id, team, contact],
        )
    await record(session, ctx, "directory.team_put", target=team, detail={"contactEmail": contact})
    for found in await teams(conn, ctx.workspace_id):
        if found.team == team:
            return found
    # Cleared, and no entry names it: the team is gone from the directory.
    return TeamOut(team=team, contact_email=None, linux_users=0)
