"""Prices per GPU model, one currency per workspace, and the rule that keeps the past.

A price holds from midnight of its `from` date in the workspace's zone (fixed when it is
stored) until the next price of the same GPU model. Costs are computed when a report is
read, so a price that changes reprices its hours; the correction window
(board/money/corrections.py) bounds which hours that may be:

- a price may be corrected (its amount) or removed until the window closes, `window`
  after it took effect (its start, or when it was entered if that was later); then it
  is fixed, and a change is a 409;
- a new price may start at most `window` ago (or anywhere, while no price is fixed yet:
  a new workspace may back-date its first list to price last quarter's reports);
- in a whole-list PUT, prices that have begun are kept when left out (removing one is a
  DELETE of that price), prices that have not begun are replaced by the ones sent;
- the currency may change only while no price is in force (electricity prices too:
  board/money/energy_rates.py).

Every change is audited; corrections and back-dated prices with the old and new amount.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, tzinfo
from decimal import Decimal
from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from board.audit.service import record
from board.auth.deps import WorkspaceContext
from board.db.connection import report_connection
from board.errors import Conflict, Unprocessable
from board.money.corrections import CorrectionWindow, refuse_backdated, refuse_fixed
from board.money.schemas import PriceOut, PricesIn, PricesOut
from board.pricing.currencies import MINOR_UNITS, check_currency
from board.pricing.energy import energy_prices_begun
from board.reportkit.params import parse_zone

# The first key of the advisory lock that serializes a workspace's price changes.
PUT_LOCK = 0x67756D6F

Key = tuple[str, date]


@dataclass(frozen=True)
class StoredPrice:
    gpu_model: str
    valid_from: date
    starts_at: datetime
    per_gpu_hour: Decimal
    entered_at: datetime

    @property
    def key(self) -> Key:
        return (self.gpu_model, self.valid_from)

    def began(self, now: datetime) -> bool:
        return self.starts_at <= now


def zone_of(zone_name: str) -> tzinfo:
    return parse_zone(zone_name)[1]


def today_in(zone_name: str) -> date:
    return datetime.now(zone_of(zone_name)).date()


def day_start(day: date, zone_name: str) -> datetime:
    """Midnight of a date in a zone, as UTC."""
    zone = zone_of(zone_name)
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)


async def lock_prices(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> None:
    """One change at a time per workspace: two racing ones must not both pass the checks."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(%s, %s)", [PUT_LOCK, workspace_id & 0x7FFFFFFF]
    )


async def stored_prices(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> list[StoredPrice]:
    cur = await conn.execute(
        "SELECT gpu_model, valid_from, starts_at, per_gpu_hour, created_at FROM prices "
        'WHERE workspace_id = %s ORDER BY gpu_model COLLATE "C", valid_from',
        [workspace_id],
    )
    return [StoredPrice(*row) for row in await cur.fetchall()]


async def stored_currency(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> str | None:
    cur = await conn.execute(
        "SELECT currency FROM workspace_currencies WHERE workspace_id = %s", [workspace_id]
    )
    row = await cur.fetchone()
    return str(row[0]) if row else None


async def refuse_currency_change(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    old: str | None,
    new: str,
    now: datetime,
) -> None:
    """409 when the currency would change while electricity prices in it have begun
    (begun GPU-hour prices are checked with the rest of a change)."""
    if old is not None and new != old and await energy_prices_begun(conn, workspace_id, now):
        raise Conflict(
            f"The currency is {old} and electricity prices in it are in force already; it "
            "cannot change, or past energy costs would change with it."
        )


def any_fixed(stored: list[StoredPrice], window: CorrectionWindow, now: datetime) -> bool:
    """Some price's window has closed: new prices may no longer be dated back freely."""
    return any(not window.is_open(now, p.starts_at, p.entered_at) for p in stored)


async def prices(
    session: AsyncSession, ctx: WorkspaceContext, window: CorrectionWindow
) -> PricesOut:
    conn = await report_connection(session)
    zone = ctx.workspace.timezone
    stored = await stored_prices(conn, ctx.workspace_id)
    currency = await stored_currency(conn, ctx.workspace_id)
    now = datetime.now(UTC)
    shown = []
    for i, price in enumerate(stored):
        following = stored[i + 1] if i + 1 < len(stored) else None
        same_model = following is not None and following.gpu_model == price.gpu_model
        until = following.valid_from if following and same_model else None
        closes = window.closes_at(price.starts_at, price.entered_at)
        shown.append(
            PriceOut(
                gpu_model=price.gpu_model,
                per_gpu_hour=float(price.per_gpu_hour),
                from_=price.valid_from,
                starts_at=price.starts_at,
                until=until,
                correctable_until=closes,
                fixed=closes <= now,
            )
        )
    return PricesOut(
        currency=currency,
        minor_units=MINOR_UNITS[currency] if currency else None,
        today=today_in(zone),
        timezone=zone,
        correction_days=window.days,
        prices=shown,
    )


def label(model: str, day: date) -> str:
    return f"{model[:100]!r} from {day.isoformat()}"


def amount_text(value: Decimal) -> str:
    """A price as the audit log keeps it: plain decimal text ("0.85"), never a float."""
    return f"{value.normalize():f}"


async def audit_price(
    session: AsyncSession,
    ctx: WorkspaceContext,
    action: str,
    key: Key,
    currency: str | None,
    new: Decimal | None,
    old: Decimal | None,
) -> None:
    """One price added, changed or removed, with its amounts before and after."""
    await record(
        session,
        ctx,
        action,
        target=label(*key),
        detail={
            "gpuModel": key[0][:100],
            "from": key[1].isoformat(),
            "currency": currency,
            "perGpuHour": amount_text(new) if new is not None else None,
            "previousPerGpuHour": amount_text(old) if old is not None else None,
        },
    )


def _sent(body: PricesIn) -> dict[Key, Decimal]:
    sent: dict[Key, Decimal] = {}
    for entry in body.prices:
        key = (entry.gpu_model, entry.from_)
        if key in sent:
            raise Unprocessable(f"prices lists {label(*key)} twice.")
        sent[key] = entry.per_gpu_hour
    return sent


async def put_prices(
    session: AsyncSession, ctx: WorkspaceContext, body: PricesIn, window: CorrectionWindow
) -> PricesOut:
    """Replace the future prices, correct recent ones (and set the currency); the rest of
    the past stays (module docstring)."""
    currency = check_currency(body.currency)
    conn = await report_connection(session)
    workspace_id = ctx.workspace_id
    zone_name = ctx.workspace.timezone
    zone = zone_of(zone_name)
    await lock_prices(conn, workspace_id)
    stored = await stored_prices(conn, workspace_id)
    by_key = {p.key: p for p in stored}
    old_currency = await stored_currency(conn, workspace_id)
    sent = _sent(body)
    # Begun by the instant stored with it, not by its date in the zone as it is now: a
    # workspace moved to a zone behind its old one must not make a begun price future.
    now = datetime.now(UTC)
    began = {p.key for p in stored if p.began(now)}
    await refuse_currency_change(conn, workspace_id, old_currency, currency, now)
    corrected: list[tuple[StoredPrice, Decimal]] = []
    backdated: set[Key] = set()
    if began:
        if old_currency is not None and currency != old_currency:
            raise Conflict(
                f"The currency is {old_currency} and prices in it are in force already; "
                "it cannot change, or past costs would change with it."
            )
        # Left out or sent unchanged, a begun price is kept; a future one only if sent
        # unchanged (it keeps the instant stored with it).
        kept = set(began)
        added: dict[Key, Decimal] = {}
        open_list = not any_fixed(stored, window, now)
        for key, per_hour in sent.items():
            found = by_key.get(key)
            if found is not None and found.per_gpu_hour == per_hour:
                kept.add(key)
            elif found is not None and found.began(now):
                refuse_fixed(window, label(*key), now, zone, found.starts_at, found.entered_at)
                corrected.append((found, per_hour))
            else:
                start = day_start(key[1], zone_name)
                if not open_list:
                    refuse_backdated(window, label(*key), now, zone, start)
                if start <= now:
                    backdated.add(key)
                added[key] = per_hour
        dropped = [p.key for p in stored if p.key not in kept]
    else:
        dropped = list(by_key)
        added = sent
    await _write(conn, workspace_id, zone_name, dropped, added, corrected)
    await set_currency_row(conn, workspace_id, currency)
    await record(
        session,
        ctx,
        "prices.put",
        target=currency,
        detail={
            "currency": currency,
            "previousCurrency": old_currency,
            "added": len(added),
            "replaced": len(dropped),
            "kept": len(began) - len(corrected),
            "corrected": len(corrected),
        },
    )
    # Each change to hours already priced: with its amounts, as the page's changes are.
    for found, per_hour in corrected:
        await audit_price(
            session, ctx, "price.changed", found.key, currency, per_hour, found.per_gpu_hour
        )
    for key in sorted(backdated):
        await audit_price(session, ctx, "price.added", key, currency, added[key], None)
    return await prices(session, ctx, window)


async def _write(
    conn: psycopg.AsyncConnection[Any],
    workspace_id: int,
    zone_name: str,
    dropped: list[Key],
    added: dict[Key, Decimal],
    corrected: list[tuple[StoredPrice, Decimal]],
) -> None:
    if dropped:
        async with conn.cursor() as delete:
            await delete.executemany(
                "DELETE FROM prices WHERE workspace_id = %s AND gpu_model = %s AND valid_from = %s",
                [(workspace_id, model, day) for model, day in dropped],
            )
    if added:
        async with conn.cursor() as insert:
            await insert.executemany(
                "INSERT INTO prices (workspace_id, gpu_model, valid_from, starts_at, zone, "
                "per_gpu_hour) VALUES (%s, %s, %s, %s, %s, %s)",
                [
                    (workspace_id, model, day, day_start(day, zone_name), zone_name, per_hour)
                    for (model, day), per_hour in added.items()
                ],
            )
    if corrected:
        # The amount only: the start, its zone and when it was entered stay, so a
        # correction never extends its own window.
        async with conn.cursor() as update:
            await update.executemany(
                "UPDATE prices SET per_gpu_hour = %s "
                "WHERE workspace_id = %s AND gpu_model = %s AND valid_from = %s",
                [(new, workspace_id, p.gpu_model, p.valid_from) for p, new in corrected],
            )


async def set_currency_row(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, currency: str
) -> None:
    await conn.execute(
        """
        INSERT INTO workspace_currencies (workspace_id, currency, minor_units)
        VALUES (%s, %s, %s)
        ON CONFLICT (workspace_id) DO UPDATE
        SET currency = EXCLUDED.currency, minor_units = EXCLUDED.minor_units, updated_at = now()
        """,
        [workspace_id, currency, MINOR_UNITS[currency]],
    )
