"""Setting and reading budgets (docs/budgets.md).

A budget is a team's GPU-hours, money, or both, per month or per quarter, dated like a
price: it holds from the period its `from` date falls in (the whole of that period,
even when set in its middle) until the period of the next entry of the same team and
kind. Setting the same team, kind and date again replaces that entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from board.audit.service import record
from board.auth.deps import WorkspaceContext
from board.budgets.periods import Period, period_of
from board.budgets.schemas import BudgetIn, BudgetOut, BudgetsOut
from board.budgets.told import look_again
from board.db.connection import report_connection
from board.directory.teams import check_team, teams
from board.errors import NotFound
from board.pricing.cost import workspace_currency

# The first key of the advisory lock that serializes a workspace's budget changes.
PUT_LOCK = 0x62756467  # "budg"


@dataclass(frozen=True)
class InForce:
    """The budget entry a team has in a period (figures None: none of that kind)."""

    team: str
    valid_from: date
    gpu_hours: Decimal | None
    amount: Decimal | None

    @property
    def any(self) -> bool:
        return self.gpu_hours is not None or self.amount is not None


def _out(team: str, kind: str, valid_from: date, hours: Any, amount: Any) -> BudgetOut:
    return BudgetOut(
        team=team,
        period=kind,
        gpu_hours=float(hours) if hours is not None else None,
        amount=float(amount) if amount is not None else None,
        from_=valid_from,
        period_start=period_of(valid_from, kind).first,
    )


async def _known(conn: psycopg.AsyncConnection[Any], workspace_id: int, team: str) -> bool:
    """A team the directory names, or one with budgets already (renamed or emptied since:
    its budget can still be changed or ended)."""
    if any(t.team == team for t in await teams(conn, workspace_id)):
        return True
    cur = await conn.execute(
        "SELECT EXISTS (SELECT 1 FROM budgets WHERE workspace_id = %s AND team = %s)",
        [workspace_id, team],
    )
    row = await cur.fetchone()
    return bool(row and row[0])


async def put_budget(
    session: AsyncSession, ctx: WorkspaceContext, name: str, body: BudgetIn
) -> BudgetOut:
    team = check_team(name)
    conn = await report_connection(session)
    await conn.execute(
        "SELECT pg_advisory_xact_lock(%s, %s)", [PUT_LOCK, ctx.workspace_id & 0x7FFFFFFF]
    )
    if not await _known(conn, ctx.workspace_id, team):
        raise NotFound(
            f"No team {team!r} in this workspace's directory; link a Linux user to it, or "
            "give it a contact email, first."
        )
    await conn.execute(
        """
        INSERT INTO budgets (workspace_id, team, period_kind, valid_from, gpu_hours, amount)
        VALUES (%s, %s, %s, %s, %s, %s)
        ON CONFLICT (workspace_id, team, period_kind, valid_from) DO UPDATE
        SET gpu_hours = EXCLUDED.gpu_hours, amount = EXCLUDED.amount, updated_at = now()
        """,
        [ctx.workspace_id, team, body.period, body.from_, body.gpu_hours, body.amount],
    )
    await look_again(conn, ctx.workspace_id)
    detail = {
        "period": body.period,
        "from": body.from_.isoformat(),
        "gpuHours": str(body.gpu_hours) if body.gpu_hours is not None else None,
        "amount": str(body.amount) if body.amount is not None else None,
    }
    await record(session, ctx, "budget.put", target=team, detail=detail)
    return _out(team, body.period, body.from_, body.gpu_hours, body.amount)


async def list_budgets(session: AsyncSession, workspace_id: int) -> BudgetsOut:
    conn = await report_connection(session)
    cur = await conn.execute(
        "SELECT team, period_kind, valid_from, gpu_hours, amount FROM budgets "
        'WHERE workspace_id = %s ORDER BY team COLLATE "C", period_kind, valid_from',
        [workspace_id],
    )
    currency = await workspace_currency(conn, workspace_id)
    return BudgetsOut(
        currency=currency.code if currency else None,
        budgets=[_out(*row) for row in await cur.fetchall()],
    )


async def in_force(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, period: Period
) -> dict[str, InForce]:
    """Each team's entry for the period: the latest of its kind dated before the period
    ends (one dated inside the period holds for all of it)."""
    cur = await conn.execute(
        """
        SELECT DISTINCT ON (team) team, valid_from, gpu_hours, amount FROM budgets
        WHERE workspace_id = %s AND period_kind = %s AND valid_from < %s
        ORDER BY team, valid_from DESC
        """,
        [workspace_id, period.kind, period.following],
    )
    return {row[0]: InForce(*row) for row in await cur.fetchall()}


async def has_budgets(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> bool:
    cur = await conn.execute(
        "SELECT EXISTS (SELECT 1 FROM budgets WHERE workspace_id = %s)", [workspace_id]
    )
    row = await cur.fetchone()
    return bool(row and row[0])
