"""One price at a time: set (add or correct), remove, and the currency.

The API's `PUT/DELETE …/prices/{from}/{gpuModel}` and the prices page both come here, so
both follow the same rules (board/money/service.py): the correction window decides what
may change, each change is audited with its amounts, and costs, computed when a report
is read, follow at once.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from sqlalchemy.ext.asyncio import AsyncSession

from board.audit.service import record
from board.auth.deps import WorkspaceContext
from board.db.connection import report_connection
from board.errors import Conflict, NotFound
from board.money.corrections import CorrectionWindow, refuse_backdated, refuse_fixed
from board.money.schemas import PriceIn, PricesOut
from board.money.service import (
    any_fixed,
    audit_price,
    day_start,
    label,
    lock_prices,
    prices,
    refuse_currency_change,
    set_currency_row,
    stored_currency,
    stored_prices,
    zone_of,
)
from board.pricing.currencies import check_currency


async def set_price(
    session: AsyncSession, ctx: WorkspaceContext, entry: PriceIn, window: CorrectionWindow
) -> PricesOut:
    """Add the price of a model from a date, or correct the amount of the one there."""
    conn = await report_connection(session)
    workspace_id = ctx.workspace_id
    zone_name = ctx.workspace.timezone
    zone = zone_of(zone_name)
    await lock_prices(conn, workspace_id)
    currency = await stored_currency(conn, workspace_id)
    if currency is None:
        raise Conflict("The workspace has no currency yet: choose it first, then set prices in it.")
    stored = await stored_prices(conn, workspace_id)
    key = (entry.gpu_model, entry.from_)
    found = next((p for p in stored if p.key == key), None)
    now = datetime.now(UTC)
    what = label(*key)
    if found is not None:
        if found.per_gpu_hour == entry.per_gpu_hour:
            return await prices(session, ctx, window)  # nothing changes, nothing to audit
        refuse_fixed(window, what, now, zone, found.starts_at, found.entered_at)
        # The amount only: its start and when it was entered stay, so a correction
        # never extends its own window.
        await conn.execute(
            "UPDATE prices SET per_gpu_hour = %s "
            "WHERE workspace_id = %s AND gpu_model = %s AND valid_from = %s",
            [entry.per_gpu_hour, workspace_id, *key],
        )
        await audit_price(
            session, ctx, "price.changed", key, currency, entry.per_gpu_hour, found.per_gpu_hour
        )
    else:
        start = day_start(entry.from_, zone_name)
        if any_fixed(stored, window, now):
            refuse_backdated(window, what, now, zone, start)
        await conn.execute(
            "INSERT INTO prices (workspace_id, gpu_model, valid_from, starts_at, zone, "
            "per_gpu_hour) VALUES (%s, %s, %s, %s, %s, %s)",
            [workspace_id, *key, start, zone_name, entry.per_gpu_hour],
        )
        await audit_price(session, ctx, "price.added", key, currency, entry.per_gpu_hour, None)
    return await prices(session, ctx, window)


async def remove_price(
    session: AsyncSession,
    ctx: WorkspaceContext,
    gpu_model: str,
    day: date,
    window: CorrectionWindow,
) -> PricesOut:
    """Remove one price while its window is open: its hours fall to the price before it."""
    conn = await report_connection(session)
    workspace_id = ctx.workspace_id
    await lock_prices(conn, workspace_id)
    stored = await stored_prices(conn, workspace_id)
    found = next((p for p in stored if p.key == (gpu_model, day)), None)
    if found is None:
        raise NotFound(f"There is no price {label(gpu_model, day)}.")
    now = datetime.now(UTC)
    zone = zone_of(ctx.workspace.timezone)
    refuse_fixed(window, label(*found.key), now, zone, found.starts_at, found.entered_at)
    await conn.execute(
        "DELETE FROM prices WHERE workspace_id = %s AND gpu_model = %s AND valid_from = %s",
        [workspace_id, *found.key],
    )
    currency = await stored_currency(conn, workspace_id)
    await audit_price(session, ctx, "price.removed", found.key, currency, None, found.per_gpu_hour)
    return await prices(session, ctx, window)


async def set_currency(
    session: AsyncSession, ctx: WorkspaceContext, code: str, window: CorrectionWindow
) -> PricesOut:
    """Choose the currency; it may change only while no price is in force."""
    currency = check_currency(code)
    conn = await report_connection(session)
    workspace_id = ctx.workspace_id
    await lock_prices(conn, workspace_id)
    old = await stored_currency(conn, workspace_id)
    if old == currency:
        return await prices(session, ctx, window)
    now = datetime.now(UTC)
    await refuse_currency_change(conn, workspace_id, old, currency, now)
    if old is not None and any(p.began(now) for p in await stored_prices(conn, workspace_id)):
        raise Conflict(
            f"The currency is {old} and prices in it are in force already; it cannot change, "
            "or past costs would change with it."
        )
    await set_currency_row(conn, workspace_id, currency)
    detail = {"currency": currency, "previousCurrency": old}
    await record(session, ctx, "currency.set", target=currency, detail=detail)
    return await prices(session, ctx, window)
