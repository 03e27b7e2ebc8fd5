"""Monthly statements per team: each Linux user's GPU-hours and their cost by GPU model,
how much of the money went to GPUs held idle, and the user's share of the energy (its
cost at the electricity prices, its CO2e), as the usage report by user counts it.

A month is cut in the workspace's zone (the zone prices are dated in). The team is the
directory's team as it is now (docs/money.md). Each line's cost is rounded once; the
totals are the exact sums rounded once, so lines add up to them within one minor unit
per line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import psycopg
from pydantic import Field

from board.errors import Unprocessable
from board.pricing.cost import Currency, amount_text, exact, has_renames, workspace_currency
from board.readmodels import ReadModel
from board.reportkit.csv import LINE_END, csv_cells
from board.reportkit.params import Window, local_day_hour, parse_window
from board.reports import repository as repo
from board.reports import service as reports
from board.reports.energy import NO_ENERGY, add_energy, energy_sums, energy_sums_sql

_MONTH = re.compile(r"^(\d{4})-(\d{2})$", re.ASCII)  # "٢٠٢٦-١١" is no month here

# Four spellings: with the names renamed GPUs had (only when the workspace has any),
# and with the energy priced (only when an electricity price or intensity is in force).
_LINES_SQL = {
    (renamed, rated): f"""
    SELECT r.team, r.linux_user, r.gpu_model,
           sum(r.held_us)::bigint, sum(r.active_us)::bigint, sum(r.idle_held_us)::bigint,
           sum(r.cost_n), sum(r.idle_cost_n), {energy_sums_sql("user", rated)}
    FROM {repo.costed_user_source(renamed=renamed, rated=rated)}
    GROUP BY 1, 2, 3
    HAVING sum(r.held_us) <> 0
    ORDER BY r.team COLLATE "C" NULLS LAST, r.linux_user COLLATE "C",
             r.gpu_model COLLATE "C" NULLS LAST
"""
    for renamed in (False, True)
    for rated in (False, True)
}


def parse_month(value: str | None, today: date) -> date:
    """`YYYY-MM` as its first day; the current month when absent."""
    if value is None or value.strip() == "":
        return today.replace(day=1)
    match = _MONTH.match(value.strip())
    if not match or not 1 <= int(match[2]) <= 12 or not 2000 <= int(match[1]) <= 2100:
        raise Unprocessable(f"month {value[:20]!r} is not a month like 2026-11.")
    return date(int(match[1]), int(match[2]), 1)


def month_window(first: date, zone: str) -> Window:
    """The month as the reports count local days (the UTC hours that start on them)."""
    following = (first + timedelta(days=32)).replace(day=1)
    return parse_window(local_day_hour(first, zone), local_day_hour(following, zone), zone)


class StatementLine(ReadModel):
    linux_user: str
    gpu_model: str | None
    held_gpu_hours: float
    active_gpu_hours: float
    idle_held_gpu_hours: float
    # Rounded to the currency's minor unit, as text with its digits ("12.30"); null
    # without prices.
    cost: str | None
    idle_held_cost: str | None
    # The user's share of the energy (reports.md: usage by user), its cost at the
    # electricity prices (text like `cost`) and CO2e; null without a rate in force.
    energy_kwh: float = Field(alias="energyKWh")
    energy_cost: str | None
    co2e_kg: float | None = Field(alias="co2eKg")


class TeamSummary(ReadModel):
    """One team's month: GPU-hours, cost, and the share of the cost spent idle-held."""

    team: str | None
    held_gpu_hours: float
    active_gpu_hours: float
    idle_held_gpu_hours: float
    cost: str | None
    idle_held_cost: str | None
    # idle-held cost / cost, from the exact figures (null when nothing cost anything).
    idle_held_cost_share: float | None
    energy_kwh: float = Field(alias="energyKWh")
    energy_cost: str | None
    co2e_kg: float | None = Field(alias="co2eKg")


class TeamStatement(ReadModel):
    workspace_name: str
    month: str
    timezone: str
    currency: str | None
    summary: TeamSummary
    lines: list[StatementLine]


@dataclass
class _Sums:
    held: int = 0
    active: int = 0
    idle_held: int = 0
    cost: int = 0
    idle_cost: int = 0
    energy: list[int] = field(default_factory=lambda: list(NO_ENERGY))
    lines: list[StatementLine] = field(default_factory=list)

    def add(
        self,
        held: int,
        active: int,
        idle_held: int,
        cost: int,
        idle_cost: int,
        energy: Sequence[int] = NO_ENERGY,
    ) -> None:
        self.held += held
        self.active += active
        self.idle_held += idle_held
        self.cost += cost
        self.idle_cost += idle_cost
        add_energy(self.energy, energy)


def _money(numerator: int, currency: Currency | None) -> str | None:
    return amount_text(numerator, currency) if currency else None


def _energy(energy: Sequence[int], currency: Currency | None) -> dict[str, Any]:
    """The energy fields of a line or summary: kWh, its cost as text, CO2e."""
    kwh_all, _, _, _, cost, co2e = reports.energy_fields(energy, currency, text=True)
    return {"energy_kwh": kwh_all, "energy_cost": cost, "co2e_kg": co2e}


async def month_figures(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, window: Window
) -> tuple[Currency | None, dict[str | None, _Sums]]:
    """Every team's lines of the window (users without a team under None), in name order."""
    currency = await workspace_currency(conn, workspace_id)
    scope = await reports.usage_scope(conn, workspace_id, window, day_keyed=False)
    statement = _LINES_SQL[(await has_renames(conn, workspace_id), scope.rates.in_force)]
    with reports.zone_known_to_database(window):
        cur = await conn.execute(statement, scope.params())
        found = await cur.fetchall()
    teams: dict[str | None, _Sums] = {}
    for team, user, model, held, active, idle_held, cost_n, idle_n, *energy_values in found:
        cost, idle_cost = exact(cost_n), exact(idle_n)
        energy = energy_sums(energy_values)
        sums = teams.setdefault(team, _Sums())
        sums.add(held, active, idle_held, cost, idle_cost, energy)
        sums.lines.append(
            StatementLine(
                linux_user=user,
                gpu_model=model,
                held_gpu_hours=reports.hours(held),
                active_gpu_hours=reports.hours(active),
                idle_held_gpu_hours=reports.hours(idle_held),
                cost=_money(cost, currency),
                idle_held_cost=_money(idle_cost, currency),
                **_energy(energy, currency),
            )
        )
    return currency, teams


def summary(team: str | None, sums: _Sums, currency: Currency | None) -> TeamSummary:
    return TeamSummary(
        team=team,
        held_gpu_hours=reports.hours(sums.held),
        active_gpu_hours=reports.hours(sums.active),
        idle_held_gpu_hours=reports.hours(sums.idle_held),
        cost=_money(sums.cost, currency),
        idle_held_cost=_money(sums.idle_cost, currency),
        idle_held_cost_share=reports.ratio(sums.idle_cost, sums.cost) if currency else None,
        **_energy(sums.energy, currency),
    )


def overview(teams: dict[str | None, _Sums], currency: Currency | None) -> list[TeamSummary]:
    return [summary(team, sums, currency) for team, sums in teams.items()]


def overview_total(teams: dict[str | None, _Sums], currency: Currency | None) -> TeamSummary:
    """Every team's month added up, each figure rounded once from the exact sums (as a
    team's own total is), so the teams' rows add up to it within a minor unit each."""
    total = _Sums()
    for sums in teams.values():
        total.add(sums.held, sums.active, sums.idle_held, sums.cost, sums.idle_cost, sums.energy)
    return summary(None, total, currency)


def statement(
    workspace_name: str,
    first: date,
    zone: str,
    team: str | None,
    teams: dict[str | None, _Sums],
    currency: Currency | None,
) -> TeamStatement:
    sums = teams.get(team, _Sums())
    return TeamStatement(
        workspace_name=workspace_name,
        month=first.strftime("%Y-%m"),
        timezone=zone,
        currency=currency.code if currency else None,
        summary=summary(team, sums, currency),
        lines=sums.lines,
    )


STATEMENT_COLUMNS = (
    "team",
    "month",
    "linuxUser",
    "gpuModel",
    "heldGpuHours",
    "activeGpuHours",
    "idleHeldGpuHours",
    "cost",
    "idleHeldCost",
    "currency",
    "energyKWh",
    "energyCost",
    "co2eKg",
)


def statement_csv(found: TeamStatement) -> str:
    """The statement as CSV: one line per user and GPU model, then a total line."""

    def row(
        user: str,
        model: str | None,
        held: float,
        active: float,
        idle: float,
        cost: str | None,
        idle_cost: str | None,
        energy: StatementLine | TeamSummary,
    ) -> Iterable[object]:
        return (
            found.summary.team,
            found.month,
            user,
            model,
            f"{held:.6f}",
            f"{active:.6f}",
            f"{idle:.6f}",
            cost,
            idle_cost,
            found.currency,
            f"{energy.energy_kwh:.6f}",
            energy.energy_cost,
            None if energy.co2e_kg is None else f"{energy.co2e_kg:.6f}",
        )

    lines = [csv_cells(STATEMENT_COLUMNS)]
    for line in found.lines:
        lines.append(
            csv_cells(
                row(
                    line.linux_user,
                    line.gpu_model,
                    line.held_gpu_hours,
                    line.active_gpu_hours,
                    line.idle_held_gpu_hours,
                    line.cost,
                    line.idle_held_cost,
                    line,
                )
            )
        )
    total = found.summary
    lines.append(
        csv_cells(
            row(
                "(total)",
                None,
                total.held_gpu_hours,
                total.active_gpu_hours,
                total.idle_held_gpu_hours,
                total.cost,
                total.idle_held_cost,
                total,
            )
        )
    )
    return LINE_END.join(lines) + LINE_END
