"""The budgets page's bars and words, and the teams' shares the usage page shows.

A bar shows what was used (solid), the forecast at the period's end (striped, from
the used part on) and the budget (a line), against the largest of the three; every bar
also says all of it in words (its label for screen readers, and the text beside it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from board.budgets.periods import period_of
from board.budgets.report import budget_report
from board.budgets.schemas import BudgetReportOut, BudgetRow
from board.budgets.service import has_budgets
from board.reportkit.params import day_now, parse_zone

STATUS_WORDS = {
    "none": "No budget",
    "ok": "On track",
    "warning": "Warning",
    "exceeded": "Exceeded",
}


@dataclass(frozen=True)
class Bar:
    team: str
    status: str
    # Percent of the bar's width (viewBox 0..100).
    used_width: float
    forecast_width: float
    budget_x: float | None
    # What the bar shows, in words: the screen reader's label and the visible text.
    words: str
    forecast_words: str


def _number(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}"


def _percent(share: float | None) -> str:
    return "" if share is None else f" ({share * 100:.0f} %)"


def _in_money(row: BudgetRow) -> bool:
    """A bar in money when the team's budget is money alone (and a cost is known)."""
    return row.budget_gpu_hours is None and row.budget_amount is not None and row.cost is not None


def _figures(row: BudgetRow) -> tuple[float, float, float | None]:
    if _in_money(row):
        return row.cost or 0.0, row.forecast_cost or 0.0, row.budget_amount
    return row.used_gpu_hours, row.forecast_gpu_hours, row.budget_gpu_hours


def _words(row: BudgetRow, digits: int) -> tuple[str, str]:
    if _in_money(row):
        unit, places = f" {row.currency}", digits
        used, forecast, budget = row.cost or 0.0, row.forecast_cost or 0.0, row.budget_amount
    else:
        unit, places = " GPU-hours", 1
        used, forecast, budget = row.used_gpu_hours, row.forecast_gpu_hours, row.budget_gpu_hours
    if budget is None:
        said = f"{_number(used, places)}{unit} used, no budget"
    else:
        said = f"{_number(used, places)} of {_number(budget, places)}{unit} used"
        said += _percent(row.used_share)
    forecast_said = f"forecast {_number(forecast, places)}{unit}"
    if budget is not None:
        forecast_said += _percent(row.forecast_share)
    return said, forecast_said


def bars(report: BudgetReportOut, digits: int) -> list[Bar]:
    """One bar per team (the Linux users without a team have no budget: not drawn)."""
    rows = [r for r in report.rows if r.team is not None]
    # Teams without a budget are drawn against the largest of them, so bars compare.
    unbudgeted = max((max(_figures(r)[:2]) for r in rows if _figures(r)[2] is None), default=0.0)
    found = []
    for row in rows:
        used, forecast, budget = _figures(row)
        scale = max(used, forecast, budget or 0.0) if budget is not None else unbudgeted
        scale = scale or 1.0
        words, forecast_words = _words(row, digits)
        found.append(
            Bar(
                team=row.team or "",
                status=row.status,
                used_width=round(100 * used / scale, 2),
                forecast_width=round(100 * max(forecast, used) / scale, 2),
                budget_x=round(100 * budget / scale, 2) if budget is not None else None,
                words=words,
                forecast_words=forecast_words,
            )
        )
    return found


async def this_months_shares(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, zone: str
) -> list[BudgetRow]:
    """The usage page's teams: this month's budgeted teams, with their shares."""
    if not await has_budgets(conn, workspace_id):
        return []
    now = datetime.now(UTC)
    period = period_of(day_now(parse_zone(zone)[1], now), "month")
    report = await budget_report(conn, workspace_id, zone, period, now)
    return [r for r in report.rows if r.status != "none"]
