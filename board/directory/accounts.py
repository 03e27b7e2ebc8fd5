"""Scheduler accounts and their teams: an admin says which team each Slurm account
belongs to, so the jobs report's account rows carry a team (docs/jobs.md).

The map is kept as it is now, like a Linux user's team: a changed team relabels every
past job of the account, as the usage report relabels a Linux user's past hours.
"""

from __future__ import annotations

from typing import Any

import psycopg
from pydantic import TypeAdapter, ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from board.audit.service import record
from board.auth.deps import WorkspaceContext
from board.db.connection import report_connection
from board.directory.schemas import Account, AccountTeamIn, AccountTeamOut
from board.directory.teams import check_team
from board.errors import Unprocessable, describe_validation_errors

_ACCOUNT = TypeAdapter(Account)


def check_account(name: str) -> str:
    """An account name from a URL or a form, checked as bodies are (422 says why)."""
    try:
        return _ACCOUNT.validate_python(name)
    except ValidationError as exc:
        detail = describe_validation_errors(exc.errors())
        raise Unprocessable(f"account {name[:64]!r}: {detail}") from None


async def account_teams(
    conn: psycopg.AsyncConnection[Any], workspace_id: int
) -> list[AccountTeamOut]:
    """Every mapped account, by name."""
    cur = await conn.execute(
        "SELECT account, team FROM account_teams WHERE workspace_id = %s "
        'ORDER BY account COLLATE "C"',
        [workspace_id],
    )
    return [AccountTeamOut(account=a, team=t) for a, t in await cur.fetchall()]


async def put_account(
    session: AsyncSession, ctx: WorkspaceContext, name: str, body: AccountTeamIn
) -> AccountTeamOut | None:
    """Map an account to a team, or (team null) forget its team; None when forgotten."""
    account = check_account(name)
    team = check_team(body.team) if body.team is not None else None
    conn = await report_connection(session)
    if team is None:
        await conn.execute(
            "DELETE FROM account_teams WHERE workspace_id = %s AND account = %s",
            [ctx.workspace_id, account],
        )
    else:
        await conn.execute(
            """
            INSERT INTO account_teams (workspace_id, account, team) VALUES (%s, %s, %s)
            ON CONFLICT (workspace_id, account) DO UPDATE
            SET team = EXCLUDED.team, updated_at = now()
            """,
            [ctx.workspace_id, account, team],
        )
    await record(session, ctx, "directory.account_put", target=account, detail={"team": team})
    return AccountTeamOut(account=account, team=team) if team is not None else None
