"""Budget notices: `budget.warning` (used or forecast at 80 % of a budget or more) and
`budget.exceeded` (used at 100 % or more), once per team and period each, to the team's
contact (the directory), the admins and every channel that listens (docs/budgets.md).

A look runs in the detection pass's transaction, at most every CHECK_EVERY per workspace
(board/budgets/told.py), over the current month and quarter in the workspace's zone. The
figures are the budgets report's (board/budgets/report.py), so a notice says what the
report and the page say. A team that passes its budget between two looks is told
`budget.exceeded` only: its warning counts as said by that notice.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from board.budgets import told
from board.budgets.periods import KINDS, period_of
from board.budgets.report import budget_report
from board.budgets.schemas import BudgetReportOut, BudgetRow
from board.budgets.service import has_budgets, in_force
from board.db.connection import report_connection
from board.directory.teams import contacts
from board.notices.detect import WorkspaceRow
from board.notices.events import enqueue
from board.reportkit.params import day_now, parse_zone

CHECK_EVERY = timedelta(minutes=5)
AT_RISK = ("warning", "exceeded")


async def admins(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> list[str]:
    cur = await conn.execute(
        "SELECT u.email FROM memberships m JOIN users u ON u.id = m.user_id "
        "WHERE m.workspace_id = %s AND m.role = 'admin' ORDER BY u.email",
        [workspace_id],
    )
    return [row[0] for row in await cur.fetchall()]


async def current_reports(
    conn: psycopg.AsyncConnection[Any], ws: WorkspaceRow, now: datetime
) -> list[BudgetReportOut]:
    """The budgets reports of the month and the quarter holding today (in the zone), of
    each kind some team has a budget of."""
    today = day_now(parse_zone(ws.timezone)[1], now)
    found = []
    for kind in KINDS:
        period = period_of(today, kind)
        if any(b.any for b in (await in_force(conn, ws.id, period)).values()):
            found.append(await budget_report(conn, ws.id, ws.timezone, period, now))
    return found


def budgets_url(public_url: str | None, slug: str, period: str) -> str | None:
    if not public_url:
        return None
    return f"{public_url.rstrip('/')}/w/{slug}/budgets?period={quote(period)}"


def notice_data(
    ws: WorkspaceRow, report: BudgetReportOut, row: BudgetRow, contact: str | None, url: str | None
) -> dict[str, Any]:
    """The event's data: the report's row and window, the workspace and who was told."""
    return {
        "workspace": {"slug": ws.slug, "name": ws.name},
        **row.model_dump(mode="json"),
        "periodKind": report.period_kind,
        "from": report.from_.isoformat(),
        "to": report.to.isoformat(),
        "tz": report.tz,
        "asOf": report.as_of.isoformat(),
        "remainingDays": report.remaining_days,
        "forecastRule": report.forecast_rule,
        "contactEmail": contact,
        "url": url,
    }


async def watch_budgets(
    session: AsyncSession,
    ws: WorkspaceRow,
    now: datetime,
    *,
    public_url: str | None,
    mail: bool,
) -> list[str]:
    """Tell what crossed a line since the last look; the event types told."""
    conn = await report_connection(session)
    if not await has_budgets(conn, ws.id):
        return []
    if not await told.check_due(conn, ws.id, now, CHECK_EVERY):
        return []
    sent: list[str] = []
    reports = await current_reports(conn, ws, now)
    if not any(row.status in AT_RISK for report in reports for row in report.rows):
        return sent
    contact_of = await contacts(conn, ws.id)
    admin_emails = await admins(conn, ws.id)
    for report in reports:
        for row in report.rows:
            if row.team is None or row.status not in AT_RISK:
                continue
            kinds = ["exceeded", "warning"] if row.status == "exceeded" else ["warning"]
            taken = await told.claim(conn, ws.id, row.team, report.period, kinds, now)
            if not taken:
                continue
            event_type = "budget.exceeded" if "exceeded" in taken else "budget.warning"
            contact = contact_of.get(row.team)
            people = ([contact] if contact else []) + admin_emails
            data = notice_data(
                ws, report, row, contact, budgets_url(public_url, ws.slug, report.period)
            )
            event_id = await enqueue(
                session, ws.id, event_type, data, now, people=people if mail else []
            )
            await told.name_event(conn, ws.id, row.team, report.period, taken, event_id)
            sent.append(event_type)
    return sent


async def teams_at_risk(
    session: AsyncSession, ws: WorkspaceRow, now: datetime
) -> list[dict[str, Any]]:
    """For the daily digest: the teams at 80 % of a budget of this month or quarter, or
    past it (used, or forecast at the period's end)."""
    conn = await report_connection(session)
    if not await has_budgets(conn, ws.id):
        return []
    return [
        {
            "team": row.team,
            "period": row.period,
            "status": row.status,
            "usedShare": row.used_share,
            "forecastShare": row.forecast_share,
            "usedGpuHours": row.used_gpu_hours,
            "budgetGpuHours": row.budget_gpu_hours,
            "cost": row.cost,
            "budgetAmount": row.budget_amount,
            "currency": row.currency,
        }
        for report in await current_reports(conn, ws, now)
        for row in report.rows
        if row.team is not None and row.status in AT_RISK
    ]
