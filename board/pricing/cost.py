"""Cost in reports: held GPU-hours × the price in force for that hour and GPU model.

Prices and the currency are pricing's (tables `prices`, `workspace_currencies` and the
view `price_ranges`; money edits them); reports join them (board/reports/repository.py)
and round with this module, so that every report that shows a cost computes it the same
way, in SQL over the rollups:

- each rollup row (repository.costed_user_source: an hour, or a whole UTC day no price
  changes in) is joined to its GPU's model (`gpus.name`) and to the price range of that
  model in force at the row's start, else the range of `*` (any other model); an hour
  with no price in force costs nothing;
- the Linux user's team comes from the directory as it is now (docs/money.md);
- a row's cost is kept exact (GPU-microseconds × price) until the end and rounded once,
  per report row, to the currency's minor unit, half to even; a total is the exact sum
  rounded once, so rows add up to it within one minor unit per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg

HOUR_US = 3_600_000_000
# Prices carry 6 decimals, so a numerator × 10^6 is an integer: rounding stays exact.
PRICE_DIGITS = 6


@dataclass(frozen=True)
class Currency:
    code: str
    minor_units: int


async def workspace_currency(
    conn: psycopg.AsyncConnection[Any], workspace_id: int
) -> Currency | None:
    """The workspace's currency, or None while it has set no prices."""
    cur = await conn.execute(
        "SELECT currency, minor_units FROM workspace_currencies WHERE workspace_id = %s",
        [workspace_id],
    )
    row = await cur.fetchone()
    return Currency(row[0], int(row[1])) if row else None


@dataclass(frozen=True)
class Pricing:
    """Which prices are in force somewhere in a report's window: any at all, and any of
    a GPU model's own (not `*`). Without any, every hour of the window costs nothing and
    reports read the rollups without pricing them (repository.user_source)."""

    in_force: bool
    by_model: bool
    # A GPU of the workspace was ever renamed: hours are then priced by the name their
    # GPU had (gpu_name_history), a join left out when there is nothing to join.
    renamed: bool = False


async def window_pricing(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, start: datetime, end: datetime
) -> Pricing:
    """The prices whose range [starts_at, ends_at) meets [start, end): a range that
    meets it but prices no rollup row (a start inside the last hour) only costs the
    report its speed, never a figure."""
    cur = await conn.execute(
        """
        SELECT coalesce(bool_or(true), false), coalesce(bool_or(gpu_model <> '*'), false),
               EXISTS (SELECT 1 FROM gpu_name_history WHERE workspace_id = %s)
        FROM price_ranges
        WHERE workspace_id = %s AND starts_at < %s AND ends_at > %s
        """,
        [workspace_id, workspace_id, end, start],
    )
    row = await cur.fetchone()
    assert row is not None  # an aggregate always answers one row
    return Pricing(bool(row[0]), bool(row[1]), bool(row[2]))


async def has_renames(conn: psycopg.AsyncConnection[Any], workspace_id: int) -> bool:
    """Whether a GPU of the workspace was ever renamed (see Pricing.renamed)."""
    cur = await conn.execute(
        "SELECT EXISTS (SELECT 1 FROM gpu_name_history WHERE workspace_id = %s)", [workspace_id]
    )
    row = await cur.fetchone()
    return bool(row and row[0])


def exact(numerator: Decimal | int | None) -> int:
    """A cost numerator from SQL (µs × price, up to 6 decimals) as an exact integer."""
    if numerator is None:
        return 0
    return int(Decimal(numerator).scaleb(PRICE_DIGITS))


def half_even(numerator: int, divisor: int) -> int:
    """numerator / divisor rounded half to even, in integers (divisor > 0)."""
    quotient, remainder = divmod(numerator, divisor)
    if 2 * remainder > divisor or (2 * remainder == divisor and quotient % 2):
        quotient += 1
    return int(quotient)


def minor_amount(numerator: int, minor_units: int) -> int:
    """exact() / HOUR_US in minor units (cents), rounded half to even, in integers."""
    return half_even(numerator, HOUR_US * 10**PRICE_DIGITS // 10**minor_units)


def minor_text(minor: int, minor_units: int) -> str:
    """An amount in minor units with exactly its minor digits ("12.30")."""
    if minor_units == 0:
        return str(minor)
    whole, fraction = divmod(minor, 10**minor_units)
    return f"{whole}.{fraction:0{minor_units}d}"


def amount(numerator: int, currency: Currency | None) -> float | None:
    """A report's `cost`: the exact numerator rounded to the currency's minor unit, or
    None while the workspace has no currency (no prices set)."""
    if currency is None:
        return None
    return float(minor_amount(numerator, currency.minor_units) / 10**currency.minor_units)


def amount_text(numerator: int, currency: Currency) -> str:
    """The rounded cost with exactly its minor digits ("12.30"): CSV files and pages."""
    return minor_text(minor_amount(numerator, currency.minor_units), currency.minor_units)
