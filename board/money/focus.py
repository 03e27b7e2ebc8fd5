"""The FOCUS 1.2 export: a day's held GPU-hours per team, Linux user and GPU model.

FOCUS (the FinOps Open Cost and Usage Specification) is what FinOps tools import. Every
column version 1.2 marks Mandatory is filled (docs/money.md lists where each value comes
from); custom columns carry the `x_` prefix the specification asks for. The costs are
the board's own chargeback figures: there is no invoice behind them, so ListCost,
EffectiveCost, BilledCost and ContractedCost are the same number, and InvoiceId is
present and null (FOCUS: null when a charge is not associated with an invoice).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg

from board.pricing.cost import Currency, amount_text, exact, has_renames, workspace_currency
from board.reportkit.csv import LINE_END, csv_cells
from board.reportkit.params import Window
from board.reports import repository as repo
from board.reports import service as reports
from board.reports.energy import energy_sums, energy_sums_sql

# FOCUS 1.2's Mandatory columns (each marked "Feature level: Mandatory" in the
# specification's column pages), with their data types.
MANDATORY: dict[str, str] = {
    "BilledCost": "Decimal",
    "BillingAccountId": "String",
    "BillingAccountName": "String",
    "BillingCurrency": "String",
    "BillingPeriodEnd": "DateTime",
    "BillingPeriodStart": "DateTime",
    "ChargeCategory": "String",
    "ChargeClass": "String",
    "ChargeDescription": "String",
    "ChargePeriodEnd": "DateTime",
    "ChargePeriodStart": "DateTime",
    "ContractedCost": "Decimal",
    "EffectiveCost": "Decimal",
    "InvoiceIssuerName": "String",
    "ListCost": "Decimal",
    "PricingQuantity": "Decimal",
    "PricingUnit": "String",
    "ProviderName": "String",
    "PublisherName": "String",
    "ServiceCategory": "String",
    "ServiceName": "String",
}
# Conditional or recommended columns the board can fill honestly.
OPTIONAL: dict[str, str] = {
    "BillingAccountType": "String",
    "ChargeFrequency": "String",
    "ConsumedQuantity": "Decimal",
    "ConsumedUnit": "String",
    # Recommended: present in every row, null while no invoice stands behind a cost.
    "InvoiceId": "String",
    "PricingCategory": "String",
    "ServiceSubcategory": "String",
}
CUSTOM: dict[str, str] = {
    "x_Team": "String",
    "x_LinuxUser": "String",
    "x_HostName": "String",
    "x_GpuModel": "String",
    "x_ActiveGpuHours": "Decimal",
    "x_IdleHeldGpuHours": "Decimal",
    # The user's share of the energy (docs/accounting.md) and its CO2e at the carbon
    # intensity in force (null unless one was in force all along).
    "x_EnergyKWh": "Decimal",
    "x_CO2eKg": "Decimal",
}
COLUMNS: tuple[str, ...] = (*MANDATORY, *OPTIONAL, *CUSTOM)

UNIT = "GPU-Hours"
SERVICE_NAME = "GPU compute"
FETCH_ROWS = 2_000  # rows per chunk of the body

# Four spellings: with the names renamed GPUs had (only when the workspace has any), and
# with CO2e (only when a carbon intensity or an electricity price is in force).
_ROWS_SQL = {
    (renamed, rated): f"""
    SELECT (r.t AT TIME ZONE %(tz)s)::date AS day, r.team, r.linux_user, r.gpu_model,
           sum(r.held_us)::bigint, sum(r.active_us)::bigint, sum(r.idle_held_us)::bigint,
           sum(r.cost_n),
           string_agg(DISTINCT coalesce(h.display_name, '(deleted host)'), '; '
                      ORDER BY coalesce(h.display_name, '(deleted host)')),
           {energy_sums_sql("user", rated)}
    FROM {repo.costed_user_source(("host_id", "day"), renamed=renamed, rated=rated)}
    LEFT JOIN hosts h ON h.workspace_id = %(ws)s AND h.id = r.host_id
    GROUP BY 1, 2, 3, 4
    HAVING sum(r.held_us) <> 0
    ORDER BY day, r.team COLLATE "C" NULLS LAST, r.linux_user COLLATE "C",
             r.gpu_model COLLATE "C" NULLS LAST
"""
    for renamed in (False, True)
    for rated in (False, True)
}


@dataclass(frozen=True)
class Account:
    """Who the export is about: the workspace (FOCUS's billing account and provider)."""

    slug: str
    name: str


def utc_text(moment: datetime) -> str:
    """FOCUS DateTime: ISO 8601 in UTC with a Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def hours_text(us: int) -> str:
    return f"{reports.hours(us):.6f}"


class _Periods:
    """Day and month bounds of the window's zone, as FOCUS DateTime text, cached."""

    def __init__(self, window: Window) -> None:
        self.window = window
        self.days: dict[date, tuple[str, str]] = {}
        self.months: dict[tuple[int, int], tuple[str, str]] = {}

    def day(self, day: date) -> tuple[str, str]:
        if day not in self.days:
            start = self.window.day_start(day)
            end = self.window.day_start(day + timedelta(days=1))
            self.days[day] = (utc_text(start), utc_text(end))
        return self.days[day]

    def month(self, day: date) -> tuple[str, str]:
        key = (day.year, day.month)
        if key not in self.months:
            first = day.replace(day=1)
            following = (first + timedelta(days=32)).replace(day=1)
            self.months[key] = (
                utc_text(self.window.day_start(first)),
                utc_text(self.window.day_start(following)),
            )
        return self.months[key]


def focus_row(
    account: Account,
    currency: Currency,
    periods: _Periods,
    found: tuple[Any, ...],
) -> tuple[object, ...]:
    """One FOCUS row in COLUMNS order from (day, team, user, model, held, active,
    idle-held, cost numerator, hosts, the energy sums: board.reports.energy)."""
    day, team, user, model, held, active, idle_held, cost_n, hosts = found[:9]
    energy = energy_sums(found[9:])
    energy_kwh, _, _, _, _, co2e = reports.energy_fields(energy, currency)
    cost = amount_text(exact(cost_n), currency)
    quantity = hours_text(held)
    day_start, day_end = periods.day(day)
    month_start, month_end = periods.month(day)
    model_name = model if model is not None else "an unknown GPU model"
    description = f"GPU-hours held on {model_name}, priced per GPU-hour"
    return (
        cost,  # BilledCost
        account.slug,  # BillingAccountId
        account.name,  # BillingAccountName
        currency.code,  # BillingCurrency
        month_end,  # BillingPeriodEnd
        month_start,  # BillingPeriodStart
        "Usage",  # ChargeCategory
        None,  # ChargeClass: no row corrects an earlier period
        description,  # ChargeDescription
        day_end,  # ChargePeriodEnd
        day_start,  # ChargePeriodStart
        cost,  # ContractedCost
        cost,  # EffectiveCost
        account.name,  # InvoiceIssuerName
        cost,  # ListCost
        quantity,  # PricingQuantity
        UNIT,  # PricingUnit
        account.name,  # ProviderName
        account.name,  # PublisherName
        "Compute",  # ServiceCategory
        SERVICE_NAME,  # ServiceName
        "Workspace",  # BillingAccountType
        "Usage-Based",  # ChargeFrequency
        quantity,  # ConsumedQuantity
        UNIT,  # ConsumedUnit
        None,  # InvoiceId: statements are computed, never issued, so none has an id
        "Standard",  # PricingCategory
        "Other (Compute)",  # ServiceSubcategory
        team,  # x_Team
        user,  # x_LinuxUser
        hosts,  # x_HostName
        model,  # x_GpuModel
        hours_text(active),  # x_ActiveGpuHours
        hours_text(idle_held),  # x_IdleHeldGpuHours
        f"{energy_kwh:.6f}",  # x_EnergyKWh
        None if co2e is None else f"{co2e:.6f}",  # x_CO2eKg
    )


async def _header_only() -> AsyncIterator[bytes]:
    yield (csv_cells(COLUMNS) + LINE_END).encode()


def local_days(window: Window) -> Iterator[Window]:
    """The window cut where its zone's days start: a piece per local day, in order (the
    first and the last may be part of one)."""
    day, lo = window.day_of(window.start), window.start
    while lo < window.end:
        day += timedelta(days=1)
        hi = min(window.day_start(day), window.end)
        if hi > lo:  # a day the zone skipped has no hours
            yield replace(window, start=lo, end=hi)
            lo = hi


async def _day_rows(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, renamed: bool, piece: Window
) -> list[tuple[Any, ...]]:
    """The export's rows of one local day (a piece of the window), in body order."""
    scope = await reports.usage_scope(conn, workspace_id, piece, day_keyed=True)
    with reports.zone_known_to_database(piece):
        cur = await conn.execute(_ROWS_SQL[(renamed, scope.rates.in_force)], scope.params())
        return await cur.fetchall()


async def prepare_focus(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, account: Account, window: Window
) -> AsyncIterator[bytes]:
    """The FOCUS CSV as chunks; the first query runs before any byte is sent, so a bad
    zone is a clean 422. A workspace without a currency (no prices yet) exports the
    header alone: every FOCUS row needs a BillingCurrency.

    The rows are read a local day at a time (every row is one day's, and the body is in
    day order), all in the report's one snapshot: the first bytes go once the first day
    is summed, not the whole window (a month of 2,000 GPUs' hours took ~5 s before its
    first byte), and the worker holds one day's rows at a time."""
    currency = await workspace_currency(conn, workspace_id)
    if currency is None:
        return _header_only()
    periods = _Periods(window)
    renamed = await has_renames(conn, workspace_id)
    days = local_days(window)
    first = next(days, None)
    rows = await _day_rows(conn, workspace_id, renamed, first) if first else []

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal rows
        yield (csv_cells(COLUMNS) + LINE_END).encode()
        while True:
            for at in range(0, len(rows), FETCH_ROWS):
                part = rows[at : at + FETCH_ROWS]
                lines = [csv_cells(focus_row(account, currency, periods, r)) for r in part]
                yield (LINE_END.join(lines) + LINE_END).encode()
            piece = next(days, None)
            if piece is None:
                return
            rows = await _day_rows(conn, workspace_id, renamed, piece)

    return chunks()
