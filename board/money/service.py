"""Prices per GPU model, one currency per workspace, and the rule that keeps the past.

A price holds from midnight of its `from` date in the workspace's zone (fixed when it is
stored) until the next price of the same GPU model. Costs already computed must never
change, so once any price is in force the past is fixed:

- a price whose day has begun (its stored `starts_at` has passed: the zone's midnight
  when it was stored, so a later change of the workspace's zone cannot make it future
  again) stays as it is: a PUT may send it again unchanged or leave it out, and it is
  kept either way; a PUT that would change it, or add another price dated today or
  earlier, is a 409;
- prices that have not begun are replaced by the ones the PUT sends;
- the currency may change only while no price is in force.

Until the first price is in force, the whole list may be set freely (back-dated for
last quarter's reports, say).
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
from board.errors import Conflict, Unprocessable
from board.money.currencies import MINOR_UNITS, check_currency
from board.money.schemas import PriceOut, PricesIn, PricesOut
from board.reports.params import parse_zone

# The first key of the advisory lock that serializes a workspace's price PUTs.
PUT_LOCK = 0x67756D6F


@dataclass(frozen=True)
class StoredPrice:
    gpu_model: str
    valid_from: date
    starts_at: datetime
    per_gpu_hour: Decimal


def today_in(zone_name: str) -> date:
    _, zone = parse_zone(zone_name)
    return datetime.now(zone).date()


def day_start(day: date, zone_name: str) -> datetime:
    """Midnight of a date in a zone, as UTC."""
    _, zone = parse_zone(zone_name)
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)


async def _stored(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> list[StoredPrice]:
    cur = await conn.execute(
        "SELECT gpu_model, valid_from, starts_at, per_gpu_hour FROM prices "
        'WHERE workspace_id = %s ORDER BY gpu_model COLLATE "C", valid_from',
        [workspace_id],
    )
    return [StoredPrice(*row) for row in await cur.fetchall()]


async def _currency(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> str | None:
    cur = await conn.execute(
        "SELECT currency FROM workspace_currencies WHERE workspace_id = %s", [workspace_id]
    )
    row = await cur.fetchone()
    return str(row[0]) if row else None


async def prices(session: AsyncSession, ctx: WorkspaceContext) -> PricesOut:
    conn = await report_connection(session)
    zone = ctx.workspace.timezone
    today = today_in(zone)
    stored = await _stored(conn, ctx.workspace_id)
    currency = await _currency(conn, ctx.workspace_id)
    now = datetime.now(UTC)
    shown = []
    for i, price in enumerate(stored):
        following = stored[i + 1] if i + 1 < len(stored) else None
        same_model = following is not None and following.gpu_model == price.gpu_model
        until = following.valid_from if following and same_model else None
        shown.append(
            PriceOut(
                gpu_model=price.gpu_model,
                per_gpu_hour=float(price.per_gpu_hour),
                from_=price.valid_from,
                starts_at=price.starts_at,
                until=until,
                fixed=price.starts_at <= now,
            )
        )
    return PricesOut(
        currency=currency,
        minor_units=MINOR_UNITS[currency] if currency else None,
        today=today,
        timezone=zone,
        prices=shown,
    )


def _label(model: str, day: date) -> str:
    return f"{model[:100]!r} from {day.isoformat()}"


async def put_prices(session: AsyncSession, ctx: WorkspaceContext, body: PricesIn) -> PricesOut:
    """Replace the future prices (and set the currency); the past stays (module docstring)."""
    currency = check_currency(body.currency)
    conn = await report_connection(session)
    workspace_id = ctx.workspace_id
    zone = ctx.workspace.timezone
    today = today_in(zone)
    # One PUT at a time per workspace: two racing PUTs must not both pass the checks.
    lock = [PUT_LOCK, workspace_id & 0x7FFFFFFF]
    await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock)
    stored = await _stored(conn, workspace_id)
    old_currency = await _currency(conn, workspace_id)
    sent: dict[tuple[str, date], Decimal] = {}
    for entry in body.prices:
        key = (entry.gpu_model, entry.from_)
        if key in sent:
            raise Unprocessable(f"prices lists {_label(*key)} twice.")
        sent[key] = entry.per_gpu_hour
    # Begun by the instant stored with it, not by its date in the zone as it is now: a
    # workspace moved to a zone behind its old one must not make a begun price future.
    now = datetime.now(UTC)
    fixed = {(p.gpu_model, p.valid_from): p for p in stored if p.starts_at <= now}
    if fixed:
        if old_currency is not None and currency != old_currency:
            raise Conflict(
                f"The currency is {old_currency} and prices in it are in force already; "
                "it cannot change, or past costs would change with it."
            )
        waiting = {(p.gpu_model, p.valid_from): p for p in stored if p.starts_at > now}
        kept = dict(fixed)
        for key, per_hour in sent.items():
            found = fixed.get(key)
            if found is None and key[1] <= today:
                # Dated today in a zone moved ahead, stored before it began: kept as
                # stored (its instant), when sent unchanged.
                found = waiting.get(key)
                if found is None or found.per_gpu_hour != per_hour:
                    raise Conflict(
                        f"{_label(*key)} would start on or before today ({today.isoformat()} "
                        f"in {zone}); prices already in force are never rewritten, so a new "
                        "price must start tomorrow or later."
                    )
                kept[key] = found
                continue
            if found is None:
                continue
            if found.per_gpu_hour != per_hour:
                raise Conflict(
                    f"{_label(*key)} is in force at {found.per_gpu_hour.normalize():f} per "
                    "GPU-hour and cannot change; add a new price from tomorrow or later instead."
                )
        dropped = [key for key in waiting if key not in kept]
        added = {k: v for k, v in sent.items() if k not in kept}
    else:
        dropped = [(p.gpu_model, p.valid_from) for p in stored]
        added = sent
    if dropped:
        async with conn.cursor() as delete:
            await delete.executemany(
                "DELETE FROM prices WHERE workspace_id = %s AND gpu_model = %s AND valid_from = %s",
                [(workspace_id, model, day) for model, day in dropped],
            )
    removed = len(dropped)
    if added:
        async with conn.cursor() as insert:
            await insert.executemany(
                "INSERT INTO prices (workspace_id, gpu_model, valid_from, starts_at, zone, "
                "per_gpu_hour) VALUES (%s, %s, %s, %s, %s, %s)",
                [
                    (workspace_id, model, day, day_start(day, zone), zone, per_hour)
                    for (model, day), per_hour in added.items()
                ],
            )
    await conn.execute(
        """
        INSERT INTO workspace_currencies (workspace_id, currency, minor_units)
        VALUES (%s, %s, %s)
        ON CONFLICT (workspace_id) DO UPDATE
        SET currency = EXCLUDED.currency, minor_units = EXCLUDED.minor_units, updated_at = now()
        """,
        [workspace_id, currency, MINOR_UNITS[currency]],
    )
    await record(
        session,
        ctx,
        "prices.put",
        target=currency,
        detail={
            "currency": currency,
            "previousCurrency": old_currency,
            "added": len(added),
            "replaced": removed,
            "kept": len(fixed),
        },
    )
    return await prices(session, ctx)
