"""Electricity prices and carbon intensity: a workspace's dated values, kept by the
rules of its GPU-hour prices (board/money/service.py), since reports compute energy
cost and CO2e with them when read, as they compute cost:

- a value holds from midnight of its date in the workspace's zone (fixed when it is
  stored) until the next value;
- the same correction window: a value may be corrected or removed until the window
  closes after it took effect (its start, or when it was entered if later), then it is
  fixed and a change is a 409; a new value may start at most the window back (or
  anywhere while no value is fixed yet);
- a whole-list PUT keeps the values that have begun when left out (a DELETE of one
  removes it), and replaces those that have not begun with the ones sent;
- electricity prices are in the workspace's currency (set with the GPU-hour prices):
  none may be set before it has one, and it may not change once one has begun.

Every change is audited; corrections and back-dated values with their old and new value.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from board.audit.service import record
from board.auth.deps import WorkspaceContext
from board.db.connection import report_connection
from board.errors import Conflict, NotFound, Unprocessable
from board.money.corrections import CorrectionWindow, refuse_backdated, refuse_fixed
from board.money.energy_schemas import (
    CarbonIntensityOut,
    CarbonValueOut,
    EnergyPriceOut,
    EnergyPricesOut,
)
from board.money.service import (
    amount_text,
    day_start,
    lock_prices,
    stored_currency,
    today_in,
    zone_of,
)
from board.pricing.currencies import MINOR_UNITS


@dataclass(frozen=True)
class Series:
    """One kind of dated value: its table and column, how the API and the audit log
    name it."""

    table: str
    column: str
    noun: str
    field: str
    # Audit actions: `<audit>.added|changed|removed` per value, `put` for a whole list.
    audit: str
    put: str


ENERGY_PRICES = Series(
    "energy_prices",
    "per_kwh",
    "electricity price",
    "perKWh",
    "energy_price",
    "energy_prices.put",
)
CARBON_INTENSITY = Series(
    "carbon_intensities",
    "grams_per_kwh",
    "carbon intensity",
    "gramsPerKWh",
    "carbon_intensity",
    "carbon_intensity.put",
)
# The statements, written out per series (table and column names are never built from
# input; the layer test reads them as they are).
_SELECT = {
    ENERGY_PRICES: "SELECT valid_from, starts_at, per_kwh, created_at FROM energy_prices "
    "WHERE workspace_id = %s ORDER BY valid_from",
    CARBON_INTENSITY: "SELECT valid_from, starts_at, grams_per_kwh, created_at "
    "FROM carbon_intensities WHERE workspace_id = %s ORDER BY valid_from",
}
_DELETE = {
    ENERGY_PRICES: "DELETE FROM energy_prices WHERE workspace_id = %s AND valid_from = %s",
    CARBON_INTENSITY: "DELETE FROM carbon_intensities WHERE workspace_id = %s AND valid_from = %s",
}
_INSERT = {
    ENERGY_PRICES: "INSERT INTO energy_prices (workspace_id, valid_from, starts_at, zone, "
    "per_kwh) VALUES (%s, %s, %s, %s, %s)",
    CARBON_INTENSITY: "INSERT INTO carbon_intensities (workspace_id, valid_from, starts_at, "
    "zone, grams_per_kwh) VALUES (%s, %s, %s, %s, %s)",
}
_UPDATE = {
    ENERGY_PRICES: "UPDATE energy_prices SET per_kwh = %s WHERE workspace_id = %s "
    "AND valid_from = %s",
    CARBON_INTENSITY: "UPDATE carbon_intensities SET grams_per_kwh = %s WHERE workspace_id = %s "
    "AND valid_from = %s",
}


@dataclass(frozen=True)
class Stored:
    valid_from: date
    starts_at: datetime
    value: Decimal
    entered_at: datetime

    def began(self, now: datetime) -> bool:
        return self.starts_at <= now


async def _stored(
    conn: psycopg.AsyncConnection[Any], series: Series, workspace_id: int
) -> list[Stored]:
    cur = await conn.execute(_SELECT[series], [workspace_id])
    return [Stored(*row) for row in await cur.fetchall()]


def _label(series: Series, day: date) -> str:
    return f"The {series.noun} from {day.isoformat()}"


def _shown(
    stored: list[Stored], window: CorrectionWindow, now: datetime
) -> list[tuple[Stored, date | None, datetime, bool]]:
    """Each value with the next one's date, when its window closes and whether it has."""
    shown = []
    for i, value in enumerate(stored):
        until = stored[i + 1].valid_from if i + 1 < len(stored) else None
        closes = window.closes_at(value.starts_at, value.entered_at)
        shown.append((value, until, closes, closes <= now))
    return shown


async def energy_prices(
    session: AsyncSession, ctx: WorkspaceContext, window: CorrectionWindow
) -> EnergyPricesOut:
    conn = await report_connection(session)
    stored = await _stored(conn, ENERGY_PRICES, ctx.workspace_id)
    currency = await stored_currency(conn, ctx.workspace_id)
    zone = ctx.workspace.timezone
    return EnergyPricesOut(
        currency=currency,
        minor_units=MINOR_UNITS[currency] if currency else None,
        today=today_in(zone),
        timezone=zone,
        correction_days=window.days,
        prices=[
            EnergyPriceOut(
                per_kwh=float(v.value),
                from_=v.valid_from,
                starts_at=v.starts_at,
                until=until,
                correctable_until=closes,
                fixed=fixed,
            )
            for v, until, closes, fixed in _shown(stored, window, datetime.now(UTC))
        ],
    )


async def carbon_intensity(
    session: AsyncSession, ctx: WorkspaceContext, window: CorrectionWindow
) -> CarbonIntensityOut:
    conn = await report_connection(session)
    stored = await _stored(conn, CARBON_INTENSITY, ctx.workspace_id)
    zone = ctx.workspace.timezone
    return CarbonIntensityOut(
        today=today_in(zone),
        timezone=zone,
        correction_days=window.days,
        values=[
            CarbonValueOut(
                grams_per_kwh=float(v.value),
                from_=v.valid_from,
                starts_at=v.starts_at,
                until=until,
                correctable_until=closes,
                fixed=fixed,
            )
            for v, until, closes, fixed in _shown(stored, window, datetime.now(UTC))
        ],
    )


async def _audit(
    session: AsyncSession,
    ctx: WorkspaceContext,
    series: Series,
    action: str,
    day: date,
    new: Decimal | None,
    old: Decimal | None,
    currency: str | None,
) -> None:
    """One value added, changed or removed, with its amounts before and after."""
    detail: dict[str, object] = {
        "from": day.isoformat(),
        series.field: amount_text(new) if new is not None else None,
        "previous" + series.field[0].upper() + series.field[1:]: amount_text(old)
        if old is not None
        else None,
    }
    if series is ENERGY_PRICES:
        detail["currency"] = currency
    await record(
        session, ctx, f"{series.audit}.{action}", target=_label(series, day), detail=detail
    )


def _sent(series: Series, entries: list[tuple[date, Decimal]]) -> dict[date, Decimal]:
    sent: dict[date, Decimal] = {}
    for day, value in entries:
        if day in sent:
            raise Unprocessable(f"The list names the {series.noun} from {day.isoformat()} twice.")
        sent[day] = value
    return sent


async def put_values(
    session: AsyncSession,
    ctx: WorkspaceContext,
    series: Series,
    entries: list[tuple[date, Decimal]],
    window: CorrectionWindow,
) -> None:
    """Replace the values that have not begun, correct recent ones, add new ones (the
    module's rules); the rest of the past stays."""
    conn = await report_connection(session)
    workspace_id = ctx.workspace_id
    zone_name = ctx.workspace.timezone
    zone = zone_of(zone_name)
    sent = _sent(series, entries)
    await lock_prices(conn, workspace_id)
    currency = await stored_currency(conn, workspace_id)
    if series is ENERGY_PRICES and sent and currency is None:
        raise Conflict(
            "The workspace has no currency yet: choose it with the GPU-hour prices "
            "(PUT …/prices), then set electricity prices in it."
        )
    stored = await _stored(conn, series, workspace_id)
    by_day = {v.valid_from: v for v in stored}
    # Begun by the instant stored with it, not by its date in the zone as it is now.
    now = datetime.now(UTC)
    began = {v.valid_from for v in stored if v.began(now)}
    open_list = all(window.is_open(now, v.starts_at, v.entered_at) for v in stored)
    kept = set(began)
    added: dict[date, Decimal] = {}
    corrected: list[tuple[Stored, Decimal]] = []
    backdated: list[date] = []
    for day, value in sent.items():
        found = by_day.get(day)
        if found is not None and found.value == value:
            kept.add(day)
        elif found is not None and found.began(now):
            what = _label(series, day)
            refuse_fixed(window, what, now, zone, found.starts_at, found.entered_at, series.noun)
            corrected.append((found, value))
        else:
            start = day_start(day, zone_name)
            if not open_list:
                refuse_backdated(window, _label(series, day), now, zone, start, series.noun)
            if start <= now:
                backdated.append(day)
            added[day] = value
    dropped = [v.valid_from for v in stored if v.valid_from not in kept]
    if dropped:
        async with conn.cursor() as delete:
            await delete.executemany(_DELETE[series], [(workspace_id, d) for d in dropped])
    if added:
        rows = [(workspace_id, d, day_start(d, zone_name), zone_name, v) for d, v in added.items()]
        async with conn.cursor() as insert:
            await insert.executemany(_INSERT[series], rows)
    if corrected:
        # The value only: its start and when it was entered stay, so a correction never
        # extends its own window.
        async with conn.cursor() as update:
            await update.executemany(
                _UPDATE[series], [(new, workspace_id, v.valid_from) for v, new in corrected]
            )
    await record(
        session,
        ctx,
        series.put,
        target=series.noun,
        detail={
            "added": len(added),
            "replaced": len(dropped),
            "kept": len(began) - len(corrected),
            "corrected": len(corrected),
        },
    )
    for found, value in corrected:
        await _audit(
            session, ctx, series, "changed", found.valid_from, value, found.value, currency
        )
    for day in sorted(backdated):
        await _audit(session, ctx, series, "added", day, added[day], None, currency)


async def remove_value(
    session: AsyncSession,
    ctx: WorkspaceContext,
    series: Series,
    day: date,
    window: CorrectionWindow,
) -> None:
    """Remove one value while its window is open: its hours fall to the value before."""
    conn = await report_connection(session)
    workspace_id = ctx.workspace_id
    await lock_prices(conn, workspace_id)
    found = next(
        (v for v in await _stored(conn, series, workspace_id) if v.valid_from == day), None
    )
    if found is None:
        raise NotFound(f"There is no {series.noun} from {day.isoformat()}.")
    now = datetime.now(UTC)
    zone = zone_of(ctx.workspace.timezone)
    what = _label(series, day)
    refuse_fixed(window, what, now, zone, found.starts_at, found.entered_at, series.noun)
    await conn.execute(_DELETE[series], [workspace_id, day])
    currency = await stored_currency(conn, workspace_id)
    await _audit(session, ctx, series, "removed", day, None, found.value, currency)
