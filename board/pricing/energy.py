"""Electricity prices and carbon intensity: what the energy of a rollup hour cost and
emitted (docs/accounting.md, "Energy and carbon").

The rollups keep energy in watt-microseconds (µJ; a kWh is 3.6 × 10^12 of them) with
the time it was measured over (`energy_covered_us`). A workspace dates a price per kWh
(table `energy_prices`, in its currency) and a carbon intensity in grams CO2e per kWh
(`carbon_intensities`), each from midnight of a date in its zone (as GPU prices). A
report prices each rollup row's energy with the value in force at the row's start (an
hour; a whole UTC day only when no value starts inside it: board.reports.repository
reads such a day from its hours), keeps Σ µJ × rate exact and rounds once per report
row: a cost to the currency's minor unit and CO2e to the milligram (6 decimals of a
kg), both half to even. A row with energy-covered time that no value was in force for,
or with no energy-covered time at all, has no cost (no CO2e): null, never a partial
figure that reads as whole.

In SQL the values starting before the report's end cut time into segments
(`width_bucket` over their starts: 0 before the first); each segment's price and
intensity are two array parameters, so pricing a row is an array lookup, not a join.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg

from board.pricing.cost import PRICE_DIGITS, Currency, half_even, minor_text

# Watt-microseconds (µJ) in a kWh.
UWS_PER_KWH = 3_600_000_000_000
# ... and in a millionth of a kWh (the 6 decimals reports show): 3.6 J.
UWS_PER_MICRO_KWH = UWS_PER_KWH // 1_000_000
# An exact CO2e numerator (Σ µJ × g/kWh, × 10^6) per milligram: µJ × g/kWh / 3.6e12 is
# grams, / 1000 kg, × 10^6 mg; with the 10^6 of the numerator, 3.6e15.
_CO2E_DIVISOR = UWS_PER_KWH * 1000 * 10**PRICE_DIGITS // 1_000_000


@dataclass(frozen=True)
class EnergyRates:
    """The segments of a report's time: `starts` (ascending), and each segment's price
    and intensity (None: none in force), one more than starts (index 0: before the
    first start). No starts: nothing in force anywhere, and reports skip the pricing."""

    starts: tuple[datetime, ...] = ()
    prices: tuple[Decimal | None, ...] = (None,)
    grams: tuple[Decimal | None, ...] = (None,)

    @property
    def in_force(self) -> bool:
        return bool(self.starts)

    def params(self) -> dict[str, Any]:
        # Text, cast in SQL: a list of only NULLs has no type psycopg could send.
        return {
            "e_starts": list(self.starts),
            "e_prices": [None if p is None else str(p) for p in self.prices],
            "e_grams": [None if g is None else str(g) for g in self.grams],
        }


NO_RATES = EnergyRates()


async def energy_rates(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, end: datetime
) -> EnergyRates:
    """The workspace's prices and intensities that start before `end` (those after it
    price no row of a report ending there), as segments."""
    cur = await conn.execute(
        """
        SELECT starts_at, 'price', per_kwh FROM energy_prices
        WHERE workspace_id = %(ws)s AND starts_at < %(end)s
        UNION ALL
        SELECT starts_at, 'carbon', grams_per_kwh FROM carbon_intensities
        WHERE workspace_id = %(ws)s AND starts_at < %(end)s
        ORDER BY 1
        """,
        {"ws": workspace_id, "end": end},
    )
    found = await cur.fetchall()
    starts: list[datetime] = []
    prices: list[Decimal | None] = [None]
    grams: list[Decimal | None] = [None]
    for at, kind, value in found:
        if not starts or starts[-1] != at:
            starts.append(at)
            prices.append(prices[-1])
            grams.append(grams[-1])
        if kind == "price":
            prices[-1] = value
        else:
            grams[-1] = value
    return EnergyRates(tuple(starts), tuple(prices), tuple(grams))


def segment_sql(at: str) -> str:
    """The 1-based index into the rate arrays of the segment the instant `at` lies in."""
    return f"width_bucket({at}, %(e_starts)s::timestamptz[]) + 1"


def rated_sums_sql(energy: str, covered: str, segment: str) -> list[str]:
    """Four aggregates over rows of `energy` µJ measured over `covered` µs in rate
    `segment`: Σ µJ × price, Σ µJ × grams, and the covered time without a price, and
    without an intensity, in force (rated_parts reads them)."""
    price = f"(%(e_prices)s::numeric[])[{segment}]"
    grams = f"(%(e_grams)s::numeric[])[{segment}]"
    return [
        f"sum(({energy}) * {price})",
        f"sum(({energy}) * {grams})",
        f"coalesce(sum({covered}) FILTER (WHERE {price} IS NULL), 0)",
        f"coalesce(sum({covered}) FILTER (WHERE {grams} IS NULL), 0)",
    ]


def _exact(value: Decimal | int | None) -> int:
    return 0 if value is None else int(Decimal(value).scaleb(PRICE_DIGITS))


def rated_parts(values: Sequence[Any], covered_us: int) -> tuple[int, int, int, int]:
    """The four aggregates from SQL as exact integers: Σ µJ × price × 10^6, Σ µJ × grams
    × 10^6, unpriced µs, unrated µs (all of `covered_us` when no value was in force)."""
    cost_n, co2e_n, unpriced, unrated = values
    return (
        _exact(cost_n),
        _exact(co2e_n),
        covered_us if unpriced is None else int(unpriced),
        covered_us if unrated is None else int(unrated),
    )


def kwh(uws: int) -> float:
    """µJ as kWh with 6 decimals, rounded half up in integers (as hours are)."""
    return (uws + UWS_PER_MICRO_KWH // 2) // UWS_PER_MICRO_KWH / 1e6


def energy_minor(numerator: int, minor_units: int) -> int:
    """An exact energy cost numerator (Σ µJ × price × 10^6) in minor units, half to even."""
    return half_even(numerator, UWS_PER_KWH * 10**PRICE_DIGITS // 10**minor_units)


def _known(covered_us: int, missing_us: int) -> bool:
    """A figure is known when energy was measured and a value was in force all along it."""
    return covered_us > 0 and missing_us == 0


def energy_cost(
    numerator: int, covered_us: int, unpriced_us: int, currency: Currency | None
) -> float | None:
    """`energyCost`, or None without a currency or a price in force all along."""
    if currency is None or not _known(covered_us, unpriced_us):
        return None
    return float(energy_minor(numerator, currency.minor_units) / 10**currency.minor_units)


def energy_cost_text(
    numerator: int, covered_us: int, unpriced_us: int, currency: Currency | None
) -> str | None:
    """`energyCost` with exactly the currency's digits ("12.30"): CSV files."""
    if currency is None or not _known(covered_us, unpriced_us):
        return None
    return minor_text(energy_minor(numerator, currency.minor_units), currency.minor_units)


def co2e_mg(numerator: int) -> int:
    """An exact CO2e numerator (Σ µJ × g/kWh × 10^6) in milligrams, half to even."""
    return half_even(numerator, _CO2E_DIVISOR)


def co2e_kg(numerator: int, covered_us: int, unrated_us: int) -> float | None:
    """`co2eKg` (6 decimals, half to even), or None without an intensity in force all along."""
    if not _known(covered_us, unrated_us):
        return None
    return co2e_mg(numerator) / 1e6


async def energy_prices_begun(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, now: datetime
) -> bool:
    """Whether an electricity price in the workspace's currency has begun (the currency
    may then no longer change)."""
    cur = await conn.execute(
        "SELECT EXISTS (SELECT 1 FROM energy_prices WHERE workspace_id = %s AND starts_at <= %s)",
        [workspace_id, now],
    )
    row = await cur.fetchone()
    return bool(row and row[0])
