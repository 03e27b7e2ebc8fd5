"""The budgets report: per team and period, the budget, what was used, and a forecast at
the period's end from the last 7 days' pace (docs/budgets.md).

The figures are the usage report's own (board.reports.service.usage_report grouped by
team, for the period's window in the workspace's zone): the same rollups, the same
rounding, the directory's teams as they are now. Every team is listed, with a budget or
not, and the Linux users without a team as `team` null.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg

from board.budgets import service
from board.budgets.periods import Period
from board.budgets.schemas import BudgetReportOut, BudgetRow
from board.directory.teams import teams
from board.pricing.cost import Currency, workspace_currency
from board.reportkit.csv import LINE_END, csv_cells
from board.reportkit.params import Window
from board.reports.service import usage_report

PACE_DAYS = 7
DAY = timedelta(days=1)
# A warning from 80 % of a budget (used or forecast), exceeded from 100 % (used).
WARN_AT = Decimal("0.8")
FORECAST_RULE = (
    "forecastGpuHours = usedGpuHours + paceGpuHoursPerDay × remainingDays, and "
    "forecastCost = cost + the cost per day at the same pace × remainingDays. The pace "
    "is the team's GPU-hours (and cost) in the 7 days before asOf (before the period's "
    "end once it is over), divided by 7: the forecast assumes the last week's pace holds "
    "to the period's end."
)
COLUMNS = tuple(field.alias or name for name, field in BudgetRow.model_fields.items())
MONEY_COLUMNS = ("budgetAmount", "cost", "forecastCost")
# The decimals a budget amount may have (NUMERIC(17,4), board.budgets.schemas).
AMOUNT_DECIMALS = 4

Figures = dict[str | None, tuple[float, float | None]]


async def by_team(conn: psycopg.AsyncConnection[Any], workspace_id: int, window: Window) -> Figures:
    """Held GPU-hours and cost per team: the usage report's rows, as it sends them."""
    report = await usage_report(conn, workspace_id, window, ("team",))
    return {row["team"]: (row["heldGpuHours"], row["cost"]) for row in report.rows}


def share(part: float | None, whole: Decimal | None) -> float | None:
    """part / whole with 6 decimals; None without a budget, or with a budget of 0."""
    if part is None or whole is None or whole == 0:
        return None
    return round(1e6 * part / float(whole)) / 1e6


def reaches(value: float | None, budget: Decimal | None, fraction: Decimal) -> bool:
    """Whether a figure (above 0) is at least `fraction` of a budget, exactly: a budget
    of 0 is reached by anything used at all, and never by nothing."""
    if value is None or budget is None or value <= 0:
        return False
    return Decimal(repr(value)) >= fraction * budget


def _largest(values: Iterable[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return max(found) if found else None


def status_of(
    budget: service.InForce | None,
    used: float,
    cost: float | None,
    forecast: float,
    forecast_cost: float | None,
) -> str:
    if budget is None or not budget.any:
        return "none"
    hours, amount = budget.gpu_hours, budget.amount
    if reaches(used, hours, Decimal(1)) or reaches(cost, amount, Decimal(1)):
        return "exceeded"
    figures = ((used, hours), (forecast, hours), (cost, amount), (forecast_cost, amount))
    return "warning" if any(reaches(v, b, WARN_AT) for v, b in figures) else "ok"


def _row(
    team: str | None,
    period: Period,
    budget: service.InForce | None,
    used: tuple[float, float | None],
    pace: tuple[float, float | None],
    remaining: float,
    currency: Currency | None,
) -> BudgetRow:
    held, cost = used
    pace_hours = round(pace[0] / PACE_DAYS, 6)
    forecast = round(held + pace_hours * remaining, 6)
    forecast_cost = None
    if currency is not None:
        cost = cost or 0.0
        per_day = (pace[1] or 0.0) / PACE_DAYS
        forecast_cost = round(cost + per_day * remaining, currency.minor_units)
    hours = budget.gpu_hours if budget else None
    amount = budget.amount if budget else None
    return BudgetRow(
        team=team,
        period=period.name,
        budget_gpu_hours=float(hours) if hours is not None else None,
        used_gpu_hours=held,
        budget_amount=float(amount) if amount is not None else None,
        cost=cost,
        used_share=_largest((share(held, hours), share(cost, amount))),
        forecast_gpu_hours=forecast,
        forecast_share=_largest((share(forecast, hours), share(forecast_cost, amount))),
        pace_gpu_hours_per_day=pace_hours,
        forecast_cost=forecast_cost,
        currency=currency.code if currency else None,
        budget_from=budget.valid_from if budget and budget.any else None,
        status=status_of(budget, held, cost, forecast, forecast_cost),
    )


def pace_window(window: Window, now: datetime) -> Window:
    """The 7 days (whole hours) before now, or before the period's end once it is over."""
    end = min(now.astimezone(UTC).replace(minute=0, second=0, microsecond=0), window.end)
    return Window(end - PACE_DAYS * DAY, end, window.tz_name, window.tz)


async def budget_report(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    zone: str,
    period: Period,
    now: datetime,
) -> BudgetReportOut:
    window = period.window(zone)
    pace = pace_window(window, now)
    currency = await workspace_currency(conn, workspace_id)
    used = await by_team(conn, workspace_id, window)
    paced = await by_team(conn, workspace_id, pace)
    budgets = await service.in_force(conn, workspace_id, period)
    names: set[str | None] = {t.team for t in await teams(conn, workspace_id)}
    names |= set(used) | set(paced) | {team for team, b in budgets.items() if b.any}
    remaining = round(max(0.0, (window.end - max(now, window.start)).total_seconds()) / 86400, 6)
    nothing = (0.0, 0.0 if currency else None)
    rows = [
        _row(
            team,
            period,
            budgets.get(team) if team is not None else None,
            used.get(team, nothing),
            paced.get(team, nothing),
            remaining,
            currency,
        )
        for team in sorted(names, key=lambda t: (t is None, t or ""))
    ]
    return BudgetReportOut(
        period=period.name,
        period_kind=period.kind,
        from_=window.local(window.start),
        to=window.local(window.end),
        tz=window.tz_name,
        as_of=window.local(now),
        remaining_days=remaining,
        pace_days=PACE_DAYS,
        pace_from=window.local(pace.start),
        pace_to=window.local(pace.end),
        forecast_rule=FORECAST_RULE,
        currency=currency.code if currency else None,
        rows=rows,
    )


def budget_amount_text(value: float | Decimal, minor_digits: int) -> str:
    """A budget's amount with the currency's digits, or its own when it has more (an
    amount takes 4: a JPY budget of 1.5), so the CSV and the page say what the JSON says."""
    exponent = Decimal(str(value)).normalize().as_tuple().exponent
    digits = max(minor_digits, min(-int(exponent), AMOUNT_DECIMALS))
    return f"{value:.{digits}f}"


def _money_cell(column: str, value: float, minor_digits: int) -> str:
    """Money with the currency's digits; a budget amount as budget_amount_text."""
    if column == "budgetAmount":
        return budget_amount_text(value, minor_digits)
    return f"{value:.{minor_digits}f}"


def report_csv(report: BudgetReportOut, minor_digits: int) -> str:
    """One line per team, the JSON rows' fields in their order; money with the
    currency's digits, text cells formula-safe (board/reportkit/csv.py)."""
    lines = [csv_cells(COLUMNS)]
    for row in report.rows:
        values = row.model_dump()
        lines.append(
            csv_cells(
                _money_cell(c, values[c], minor_digits)
                if c in MONEY_COLUMNS and isinstance(values[c], float)
                else values[c]
                for c in COLUMNS
            )
        )
    return LINE_END.join(lines) + LINE_END
